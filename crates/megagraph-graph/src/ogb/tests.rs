use super::*;
use std::sync::Mutex;

/// A 4-node path in the raw layout, plain CSV.
fn tiny(dir: &Path) {
    let raw = dir.join("raw");
    let split = dir.join("split").join("s");
    fs::create_dir_all(&raw).unwrap();
    fs::create_dir_all(&split).unwrap();
    fs::write(raw.join("edge.csv"), "0,1\n1,2\n2,3\n").unwrap();
    fs::write(raw.join("num-node-list.csv"), "4\n").unwrap();
    fs::write(raw.join("node-label.csv"), "0\n1\n0\n1\n").unwrap();
    fs::write(split.join("train.csv"), "0\n1\n").unwrap();
    fs::write(split.join("valid.csv"), "2\n").unwrap();
    fs::write(split.join("test.csv"), "3\n").unwrap();
}

#[test]
fn progress_reports_the_edge_file_and_not_cache_hits() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    tiny(data.path());
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let reports = Mutex::new(Vec::new());
    let record = |read, total| reports.lock().unwrap().push((read, total));
    let parsed = load_ogb_with_progress(data.path(), &options, &record).unwrap();
    assert_eq!(reports.lock().unwrap().last(), Some(&(12, 12)));
    reports.lock().unwrap().clear();
    let cached = load_ogb_with_progress(data.path(), &options, &record).unwrap();
    assert!(reports.lock().unwrap().is_empty(), "the cache answered");
    assert_eq!(parsed, cached);
    assert_eq!(
        parsed,
        load_ogb(data.path(), &LoadOptions::default()).unwrap()
    );
}

#[test]
fn edge_features_load_per_arc_and_bypass_the_cache() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    tiny(data.path());
    fs::write(data.path().join("raw/edge-feat.csv"), "1.5,-1\n2,0.25\n3,7\n").unwrap();
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let calls = Mutex::new(0);
    let count = |_: u64, _: u64| *calls.lock().unwrap() += 1;
    let first = load_ogb_with_progress(data.path(), &options, &count).unwrap();
    let features = first.edge_features.as_ref().expect("edge features");
    assert_eq!((features.dim, features.num_arcs()), (2, 6));
    let graph = &first.graph;
    assert_eq!(features.of_arc(graph, 1, 2).unwrap(), [2.0, 0.25]);
    assert_eq!(features.of_arc(graph, 2, 1).unwrap(), [2.0, 0.25]);
    assert_eq!(features.of_arc(graph, 3, 2).unwrap(), [3.0, 7.0]);
    let before = *calls.lock().unwrap();
    let second = load_ogb_with_progress(data.path(), &options, &count).unwrap();
    assert!(*calls.lock().unwrap() > before, "parsed again: no cache for edge features");
    assert_eq!(first, second);
    assert_eq!(fs::read_dir(cache.path()).unwrap().count(), 0, "nothing cached");
}

#[test]
fn edge_feature_errors_name_the_file_and_line() {
    let data = tempfile::tempdir().unwrap();
    tiny(data.path());
    let path = data.path().join("raw/edge-feat.csv");
    // a row of another width
    fs::write(&path, "1,2\n3\n4,5\n").unwrap();
    match load_ogb(data.path(), &LoadOptions::default()) {
        Err(LoadError::FieldCount { path: p, line: 2, expected: 2, found: 1 }) => {
            assert!(p.ends_with("edge-feat.csv"), "{}", p.display())
        }
        other => panic!("expected a field count error, got {other:?}"),
    }
    // a row short
    fs::write(&path, "1,2\n3,4\n").unwrap();
    match load_ogb(data.path(), &LoadOptions::default()) {
        Err(LoadError::CountMismatch { expected: 3, found: 2, .. }) => {}
        other => panic!("expected a row count error, got {other:?}"),
    }
    // a value that is not a number
    fs::write(&path, "1,2\n3,x\n4,5\n").unwrap();
    match load_ogb(data.path(), &LoadOptions::default()) {
        Err(LoadError::Parse { line: 2, field: 2, .. }) => {}
        other => panic!("expected a parse error, got {other:?}"),
    }
    // without the file, the dataset loads as before
    fs::remove_file(&path).unwrap();
    assert!(load_ogb(data.path(), &LoadOptions::default()).unwrap().edge_features.is_none());
}

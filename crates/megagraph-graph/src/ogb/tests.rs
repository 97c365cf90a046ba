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

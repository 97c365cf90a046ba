use super::*;
use crate::error::LoadError;
use crate::temporal::test_files::write_file;

const META: &str = r#"{"num_nodes": 6, "num_events": 4, "num_edge_features": 2,
    "bipartite": true, "positive_labels": 1, "time_min": 0.5, "time_max": 9.0}"#;
const EDGES: &str =
    "src,dst,time,label,f0,f1\n0,3,0.5,0,1.0,2\n1,4,2,1,-1,0.25\n0,4,2,0,0,0\n2,5,9,0,3,4\n";

fn dataset(edges: &str, meta: Option<&str>, gz: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), "edges.csv", edges, gz);
    if let Some(m) = meta {
        write_file(dir.path(), "meta.json", m, false);
    }
    dir
}

#[test]
fn loads_plain_and_gzip_with_features() {
    for gz in [false, true] {
        let dir = dataset(EDGES, Some(META), gz);
        let s = load_temporal_dir(dir.path()).expect("loads");
        assert_eq!(s.num_nodes(), 6);
        assert_eq!(s.src(), &[0, 1, 0, 2]);
        assert_eq!(s.dst(), &[3, 4, 4, 5]);
        assert_eq!(s.time(), &[0.5, 2.0, 2.0, 9.0]);
        assert_eq!(s.label(), &[0, 1, 0, 0]);
        assert_eq!(s.edge_feature_dim(), 2);
        assert_eq!(
            s.edge_features().expect("features"),
            &[1.0, 2.0, -1.0, 0.25, 0.0, 0.0, 3.0, 4.0]
        );
        assert_eq!(s.bipartite(), Some(true));
    }
}

#[test]
fn without_meta_the_node_count_is_the_largest_id_plus_one() {
    let dir = dataset("src,dst,time,label\n0,7,1,0\n2,3,1,0\n", None, false);
    let s = load_temporal_dir(dir.path()).expect("loads");
    assert_eq!((s.num_nodes(), s.len(), s.bipartite()), (8, 2, None));
}

#[test]
fn out_of_order_time_names_the_line() {
    let edges = "src,dst,time,label\n0,1,1,0\n1,2,3,0\n2,0,2.5,0\n";
    let dir = dataset(edges, None, true);
    match load_temporal_dir(dir.path()) {
        Err(TemporalError::UnsortedLine {
            path,
            line,
            time,
            previous,
        }) => {
            assert!(path.ends_with("edges.csv.gz"));
            assert_eq!((line, time, previous), (4, 2.5, 3.0));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn malformed_fields_name_line_and_field() {
    let cases = [
        ("src,dst,time,label\n0,1,1,0\n0,1,x,0\n", 3, 3),
        ("src,dst,time,label\n0,1,1,0\n0,-1,2,0\n", 3, 2),
        ("src,dst,time,label\n0,1,inf,0\n", 2, 3),
        ("src,dst,time,label\n0,1,1,256\n", 2, 4),
    ];
    for (edges, want_line, want_field) in cases {
        let dir = dataset(edges, None, false);
        match load_temporal_dir(dir.path()) {
            Err(TemporalError::Load(LoadError::Parse { line, field, .. })) => {
                assert_eq!((line, field), (want_line, want_field), "{edges}");
            }
            other => panic!("{edges}: unexpected {other:?}"),
        }
    }
    let dir = dataset("src,dst,time,label\n0,1,1,0\n0,1,2\n", None, false);
    assert!(matches!(
        load_temporal_dir(dir.path()),
        Err(TemporalError::Load(LoadError::FieldCount {
            line: 3,
            expected: 4,
            found: 3,
            ..
        }))
    ));
}

#[test]
fn node_ids_are_checked_against_meta() {
    let meta = r#"{"num_nodes": 3}"#;
    let dir = dataset("src,dst,time,label\n0,1,1,0\n0,3,2,0\n", Some(meta), false);
    assert!(matches!(
        load_temporal_dir(dir.path()),
        Err(TemporalError::Load(LoadError::NodeOutOfRange {
            line: 3,
            field: 2,
            node: 3,
            ..
        }))
    ));
}

#[test]
fn meta_counts_are_checked() {
    let cases = [
        (r#"{"num_events": 5}"#, "num_events"),
        (r#"{"num_edge_features": 0}"#, "num_edge_features"),
        (r#"{"positive_labels": 0}"#, "positive_labels"),
        (r#"{"time_max": 8.0}"#, "time_max"),
    ];
    for (meta, want) in cases {
        let dir = dataset(EDGES, Some(meta), false);
        match load_temporal_dir(dir.path()) {
            Err(TemporalError::MetaMismatch { field, .. }) => assert_eq!(field, want),
            other => panic!("{meta}: unexpected {other:?}"),
        }
    }
    let dir = dataset(EDGES, Some("{\"num_events\": "), false);
    assert!(matches!(
        load_temporal_dir(dir.path()),
        Err(TemporalError::Load(LoadError::Meta { .. }))
    ));
}

#[test]
fn bad_header_and_missing_file_are_errors() {
    let dir = dataset("dst,src,time,label\n0,1,1,0\n", None, false);
    assert!(matches!(
        load_temporal_dir(dir.path()),
        Err(TemporalError::Header { line: 1, .. })
    ));
    let empty = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        load_temporal_dir(empty.path()),
        Err(TemporalError::Load(LoadError::MissingFile { .. }))
    ));
}

use super::*;
use crate::error::LoadError;
use crate::temporal::ChronologicalSplit;
use crate::temporal::test_files::write_file;

const EDGES: &str =
    ",src,dst,time,int_roll,ext_roll\n0,0,3,0.0,0,0\n1,1,3,1.0,0,0\n2,2,4,1.0,0,1\n3,0,4,4.0,0,2\n";

#[test]
fn loads_edges_roll_and_feature_csv() {
    for gz in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let edges = write_file(dir.path(), "edges.csv", EDGES, gz);
        let feats = write_file(dir.path(), "edge_features.csv", "1,2\n3,4\n5,6\n7,8\n", gz);
        let t = load_tgl(&edges, Some(&feats)).expect("loads");
        let s = &t.events;
        assert_eq!(s.num_nodes(), 5);
        assert_eq!(s.src(), &[0, 1, 2, 0]);
        assert_eq!(s.dst(), &[3, 3, 4, 4]);
        assert_eq!(s.time(), &[0.0, 1.0, 1.0, 4.0]);
        assert_eq!(s.label(), &[0; 4]);
        assert_eq!(s.edge_feature_dim(), 2);
        assert_eq!(s.edge_features().expect("features")[6..], [7.0, 8.0]);
        let roll = t.ext_roll.expect("ext_roll");
        assert_eq!(roll, vec![0, 0, 1, 2]);
        let split = ChronologicalSplit::from_roll(&roll).expect("split");
        assert_eq!((split.train, split.valid, split.test), (0..2, 2..3, 3..4));
    }
}

#[test]
fn minimal_header_without_roll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edges = write_file(dir.path(), "edges.csv", ",src,dst,time\n0,1,2,5\n", false);
    let t = load_tgl(&edges, None).expect("loads");
    assert_eq!(
        (t.events.len(), t.events.num_nodes(), t.ext_roll),
        (1, 3, None)
    );
}

#[test]
fn errors_name_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad_header = write_file(dir.path(), "a.csv", "idx,src,dst,time\n0,1,2,5\n", false);
    assert!(matches!(
        load_tgl(&bad_header, None),
        Err(TemporalError::Header { .. })
    ));

    let skipped = write_file(
        dir.path(),
        "b.csv",
        ",src,dst,time\n0,1,2,5\n2,1,2,6\n",
        false,
    );
    assert!(matches!(
        load_tgl(&skipped, None),
        Err(TemporalError::EventIndex {
            line: 3,
            expected: 1,
            found: 2,
            ..
        })
    ));

    let unsorted = write_file(
        dir.path(),
        "c.csv",
        ",src,dst,time\n0,1,2,5\n1,1,2,4\n",
        false,
    );
    assert!(matches!(
        load_tgl(&unsorted, None),
        Err(TemporalError::UnsortedLine { line: 3, .. })
    ));

    let bad_roll = write_file(
        dir.path(),
        "d.csv",
        ",src,dst,time,ext_roll\n0,1,2,5,3\n",
        false,
    );
    assert!(matches!(
        load_tgl(&bad_roll, None),
        Err(TemporalError::Load(LoadError::Parse {
            line: 2,
            field: 5,
            ..
        }))
    ));

    let edges = write_file(dir.path(), "e.csv", EDGES, false);
    let short = write_file(dir.path(), "f.csv", "1,2\n3,4\n", false);
    assert!(matches!(
        load_tgl(&edges, Some(&short)),
        Err(TemporalError::Load(LoadError::CountMismatch {
            expected: 4,
            found: 2,
            ..
        }))
    ));
    let ragged = write_file(dir.path(), "g.csv", "1,2\n3\n5,6\n7,8\n", false);
    assert!(matches!(
        load_tgl(&edges, Some(&ragged)),
        Err(TemporalError::Load(LoadError::FieldCount { line: 2, .. }))
    ));
}

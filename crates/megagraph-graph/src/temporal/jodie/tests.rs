use super::*;
use crate::error::LoadError;
use crate::temporal::test_files::write_file;

const HEADER: &str = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n";

#[test]
fn items_are_offset_after_users() {
    let text = format!("{HEADER}0,0,0.0,0,0.1,0.2,0.3\n2,1,5.0,1,1,2,3\n1,0,5.0,0,-1,-2,-3\n");
    for gz in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), "wiki.csv", &text, gz);
        let j = load_jodie(&path).expect("loads");
        assert_eq!((j.num_users, j.num_items), (3, 2));
        let s = &j.events;
        assert_eq!(s.num_nodes(), 5);
        assert_eq!(s.src(), &[0, 2, 1]);
        assert_eq!(s.dst(), &[3, 4, 3]);
        assert_eq!(s.time(), &[0.0, 5.0, 5.0]);
        assert_eq!(s.label(), &[0, 1, 0]);
        assert_eq!(s.edge_feature_dim(), 3);
        assert_eq!(s.edge_features().expect("features")[3..6], [1.0, 2.0, 3.0]);
        assert_eq!(s.bipartite(), Some(true));
    }
}

#[test]
fn featureless_rows_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "a.csv",
        "user_id,item_id,timestamp,state_label\n0,0,1,0\n",
        false,
    );
    let j = load_jodie(&path).expect("loads");
    assert_eq!((j.events.len(), j.events.edge_feature_dim()), (1, 0));
}

#[test]
fn errors_name_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "a.csv", "0,0,1,0\n1,1,2,0\n", false);
    assert!(matches!(
        load_jodie(&path),
        Err(TemporalError::Header { line: 1, .. })
    ));

    let text = format!("{HEADER}0,0,1,0,0.5\n0,1,2,0,0.5,0.5\n");
    let path = write_file(dir.path(), "b.csv", &text, false);
    assert!(matches!(
        load_jodie(&path),
        Err(TemporalError::Load(LoadError::FieldCount {
            line: 3,
            expected: 5,
            found: 6,
            ..
        }))
    ));

    let text = format!("{HEADER}0,0,3,0\n0,1,2,0\n");
    let path = write_file(dir.path(), "c.csv", &text, true);
    assert!(matches!(
        load_jodie(&path),
        Err(TemporalError::UnsortedLine { line: 3, .. })
    ));

    let text = format!("{HEADER}0,0,1,0,nan\n");
    let path = write_file(dir.path(), "d.csv", &text, false);
    assert!(matches!(
        load_jodie(&path),
        Err(TemporalError::Load(LoadError::NonFinite {
            line: 2,
            field: 5,
            ..
        }))
    ));

    let missing = dir.path().join("none.csv");
    assert!(matches!(
        load_jodie(&missing),
        Err(TemporalError::Load(LoadError::MissingFile { .. }))
    ));
}

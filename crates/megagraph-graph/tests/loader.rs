//! OGB-layout loader: well-formed gzip and plain fixtures, and every malformed-input case
//! (asserting the error variant, the file and the line).

mod common;

use std::path::Path;

use common::{fixture, path_of, write};
use megagraph_graph::{GraphOptions, LoadError, LoadOptions, SelfLoops, load_ogb};

fn load(dir: &Path) -> Result<megagraph_graph::Dataset, LoadError> {
    load_ogb(dir, &LoadOptions::default())
}

/// The file name of the path an error names.
fn file_of(err: &LoadError) -> String {
    let path = match err {
        LoadError::MissingFile { path }
        | LoadError::Io { path, .. }
        | LoadError::Gzip { path, .. }
        | LoadError::Parse { path, .. }
        | LoadError::FieldCount { path, .. }
        | LoadError::EmptyLine { path, .. }
        | LoadError::NodeOutOfRange { path, .. }
        | LoadError::NonFinite { path, .. }
        | LoadError::InvalidLabel { path, .. }
        | LoadError::CountMismatch { path, .. }
        | LoadError::EmptySplit { path }
        | LoadError::UnknownSplitScheme { path, .. }
        | LoadError::NoSplitScheme { path }
        | LoadError::Meta { path, .. }
        | LoadError::TooManyNodes { path, .. }
        | LoadError::Graph { path, .. } => path,
    };
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn gzip_and_plain_fixtures_load_identically() {
    let gz = fixture(true);
    let plain = fixture(false);
    let a = load(gz.path()).unwrap();
    let b = load(plain.path()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.name, "tiny");
    assert_eq!(a.graph.num_nodes(), 5);
    assert_eq!(a.graph.num_edges(), 8, "path of 4 edges, symmetrized");
    assert_eq!(a.graph.neighbors(2), &[1, 3]);
    assert_eq!(a.graph.out_degrees(), &[1, 1, 1, 1, 0]);
    assert_eq!(a.graph.in_degrees(), &[0, 1, 1, 1, 1]);
    let f = a.features.as_ref().unwrap();
    assert_eq!((f.num_nodes, f.dim), (5, 3));
    assert_eq!(f.row(1), &[-1.5, 0.0, 0.3]);
    assert_eq!(f.row(4), &[2.25, -3.0, 4.0]);
    assert_eq!(a.labels, vec![0, 1, 2, -1, 1]);
    assert_eq!(a.num_classes, 3);
    assert_eq!(a.num_labeled(), 4);
    // No scheme requested: the first in sorted order.
    assert_eq!(a.split.train, vec![0, 1]);
    assert_eq!(a.split.valid, vec![2]);
    assert_eq!(a.split.test, vec![3, 4]);
}

#[test]
fn split_scheme_graph_options_crlf_and_no_meta() {
    let dir = fixture(false);
    std::fs::remove_file(dir.path().join("meta.json")).unwrap();
    write(
        dir.path(),
        "raw/edge.csv",
        b"0,1\r\n1,2\r\n2,3\r\n3,4\r\n3,3\r\n",
        false,
    );
    write(dir.path(), "raw/num-edge-list.csv", b"5", false);
    write(dir.path(), "raw/node-feat.csv", b"", false);
    std::fs::remove_file(dir.path().join("raw/node-feat.csv")).unwrap();
    let options = LoadOptions {
        split_scheme: Some("s2".into()),
        graph: GraphOptions {
            symmetrize: false,
            self_loops: SelfLoops::Keep,
        },
        cache_dir: None,
    };
    let ds = load_ogb(dir.path(), &options).unwrap();
    let folder = dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(ds.name, folder);
    assert!(ds.features.is_none());
    assert_eq!(ds.feature_dim(), 0);
    assert_eq!(ds.split.test, vec![0, 1, 2]);
    assert!(!ds.graph.is_symmetric());
    assert_eq!(ds.graph.num_edges(), 5);
    assert_eq!(ds.graph.neighbors(3), &[3, 4]);
}

#[test]
fn missing_files() {
    for (rel, gz) in [
        ("raw/edge.csv", true),
        ("raw/node-label.csv", false),
        ("split/s1/test.csv", true),
    ] {
        let dir = fixture(gz);
        std::fs::remove_file(path_of(dir.path(), rel, gz)).unwrap();
        let err = load(dir.path()).unwrap_err();
        let want = format!(
            "{}.gz",
            Path::new(rel).file_name().unwrap().to_string_lossy()
        );
        assert!(matches!(err, LoadError::MissingFile { .. }), "{err}");
        assert_eq!(file_of(&err), want);
    }
    let err = load(Path::new("/nonexistent/megagraph/dataset")).unwrap_err();
    assert!(matches!(err, LoadError::MissingFile { .. }), "{err}");
}

#[test]
fn ragged_feature_row() {
    for gz in [true, false] {
        let dir = fixture(gz);
        write(
            dir.path(),
            "raw/node-feat.csv",
            b"1,2,3\n4,5,6\n7,8\n1,1,1\n2,2,2\n",
            gz,
        );
        let err = load(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                LoadError::FieldCount {
                    line: 3,
                    expected: 3,
                    found: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(file_of(&err).starts_with("node-feat.csv"));
        write(
            dir.path(),
            "raw/node-feat.csv",
            b"1,2,3\n4,5,6\n7,8,9\n1,1,1,1\n2,2,2\n",
            gz,
        );
        let err = load(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                LoadError::FieldCount {
                    line: 4,
                    expected: 3,
                    found: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn non_numeric_fields() {
    let cases: &[(&str, &[u8], u64, usize)] = &[
        ("raw/edge.csv", b"0,1\n1,x\n2,3\n3,4\n", 2, 2),
        ("raw/edge.csv", b"0,1\n1,2\n-2,3\n3,4\n", 3, 1),
        (
            "raw/node-feat.csv",
            b"1,2,3\n4,5,6\n7,abc,9\n1,1,1\n2,2,2\n",
            3,
            2,
        ),
        ("raw/node-label.csv", b"0\n1\ntwo\n-1\n1\n", 3, 1),
        ("raw/num-node-list.csv", b"five\n", 1, 1),
        ("split/s1/valid.csv", b"2.5\n", 1, 1),
    ];
    for &(rel, content, line, field) in cases {
        let dir = fixture(true);
        write(dir.path(), rel, content, true);
        let err = load(dir.path()).unwrap_err();
        match &err {
            LoadError::Parse {
                line: l, field: f, ..
            } => {
                assert_eq!((*l, *f), (line, field), "{rel}: {err}")
            }
            other => panic!("{rel}: expected Parse, got {other}"),
        }
        assert_eq!(
            file_of(&err),
            format!(
                "{}.gz",
                Path::new(rel).file_name().unwrap().to_string_lossy()
            )
        );
    }
}

#[test]
fn edge_node_out_of_range() {
    let dir = fixture(true);
    write(dir.path(), "raw/edge.csv", b"0,1\n1,2\n2,3\n3,5\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::NodeOutOfRange {
                line: 4,
                field: 2,
                node: 5,
                num_nodes: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "edge.csv.gz");
}

#[test]
fn edge_rows_with_wrong_field_count() {
    let dir = fixture(false);
    write(dir.path(), "raw/edge.csv", b"0,1\n1,2,7\n2,3\n3,4\n", false);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::FieldCount {
                line: 2,
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "edge.csv");
}

#[test]
fn edge_row_count_differs_from_num_edge_list() {
    let dir = fixture(true);
    write(dir.path(), "raw/num-edge-list.csv", b"7\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::CountMismatch {
                expected: 7,
                found: 4,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "edge.csv.gz");
}

#[test]
fn label_count_differs_from_node_count() {
    for (content, found) in [(&b"0\n1\n2\n1\n"[..], 4), (b"0\n1\n2\n1\n1\n0\n", 6)] {
        let dir = fixture(true);
        write(dir.path(), "raw/node-label.csv", content, true);
        let err = load(dir.path()).unwrap_err();
        assert!(
            matches!(err, LoadError::CountMismatch { expected: 5, found: f, .. } if f == found),
            "{err}"
        );
        assert_eq!(file_of(&err), "node-label.csv.gz");
    }
}

#[test]
fn feature_row_count_differs_from_node_count() {
    let dir = fixture(true);
    write(dir.path(), "raw/node-feat.csv", b"1,2,3\n4,5,6\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::CountMismatch {
                expected: 5,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "node-feat.csv.gz");
}

#[test]
fn negative_labels_other_than_minus_one() {
    let dir = fixture(true);
    write(dir.path(), "raw/node-label.csv", b"0\n1\n-1\n-2\n1\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::InvalidLabel {
                line: 4,
                label: -2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "node-label.csv.gz");
    // Class ids beyond i32::MAX (would overflow `max + 1`).
    write(
        dir.path(),
        "raw/node-label.csv",
        b"0\n9223372036854775807\n1\n1\n1\n",
        true,
    );
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(err, LoadError::InvalidLabel { line: 2, .. }),
        "{err}"
    );
}

#[test]
fn split_id_out_of_range() {
    let dir = fixture(true);
    write(dir.path(), "split/s1/test.csv", b"3\n7\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::NodeOutOfRange {
                line: 2,
                field: 1,
                node: 7,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(file_of(&err), "test.csv.gz");
}

#[test]
fn empty_split() {
    for content in [&b""[..], b"\n\n"] {
        let dir = fixture(true);
        write(dir.path(), "split/s1/valid.csv", content, true);
        let err = load(dir.path()).unwrap_err();
        assert!(matches!(err, LoadError::EmptySplit { .. }), "{err}");
        assert_eq!(file_of(&err), "valid.csv.gz");
    }
}

#[test]
fn non_finite_features() {
    for (bad, line, field) in [
        ("nan", 2, 3),
        ("inf", 5, 1),
        ("-infinity", 1, 2),
        ("1e39", 3, 1),
    ] {
        let mut rows = vec!["1,2,3".to_string(); 5];
        let mut cells: Vec<String> = rows[line - 1].split(',').map(String::from).collect();
        cells[field - 1] = bad.to_string();
        rows[line - 1] = cells.join(",");
        let text = rows.join("\n") + "\n";
        let dir = fixture(true);
        write(dir.path(), "raw/node-feat.csv", text.as_bytes(), true);
        let err = load(dir.path()).unwrap_err();
        match &err {
            LoadError::NonFinite {
                line: l,
                field: f,
                value,
                ..
            } => {
                assert_eq!((*l, *f, value.as_str()), (line as u64, field, bad), "{err}")
            }
            other => panic!("{bad}: expected NonFinite, got {other}"),
        }
        assert_eq!(file_of(&err), "node-feat.csv.gz");
    }
}

#[test]
fn unknown_split_scheme_lists_the_available_ones() {
    let dir = fixture(true);
    let options = LoadOptions {
        split_scheme: Some("nope".into()),
        ..LoadOptions::default()
    };
    let err = load_ogb(dir.path(), &options).unwrap_err();
    match &err {
        LoadError::UnknownSplitScheme {
            requested,
            available,
            ..
        } => {
            assert_eq!(requested, "nope");
            assert_eq!(available, &["s1".to_string(), "s2".to_string()]);
        }
        other => panic!("expected UnknownSplitScheme, got {other}"),
    }
    assert!(err.to_string().contains("s1") && err.to_string().contains("s2"));
    assert_eq!(file_of(&err), "split");
}

#[test]
fn no_split_scheme() {
    let dir = fixture(true);
    std::fs::remove_dir_all(dir.path().join("split")).unwrap();
    std::fs::create_dir(dir.path().join("split")).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::NoSplitScheme { .. }), "{err}");
}

#[test]
fn bad_gzip() {
    let dir = fixture(true);
    // Plain text under a .gz name.
    std::fs::write(dir.path().join("raw/edge.csv.gz"), b"0,1\n1,2\n").unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::Gzip { .. }), "{err}");
    assert_eq!(file_of(&err), "edge.csv.gz");
    // A truncated stream.
    write(
        dir.path(),
        "raw/node-feat.csv",
        "1.5,2.5,3.5\n".repeat(5).as_bytes(),
        true,
    );
    let path = dir.path().join("raw/node-feat.csv.gz");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    write(dir.path(), "raw/edge.csv", b"0,1\n1,2\n2,3\n3,4\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::Gzip { .. }), "{err}");
    assert_eq!(file_of(&err), "node-feat.csv.gz");
    // Corrupt deflate data after a valid header.
    let mut bytes = bytes.clone();
    for b in bytes.iter_mut().skip(12).take(8) {
        *b ^= 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::Gzip { .. }), "{err}");
}

#[test]
fn blank_lines_only_at_the_end() {
    let dir = fixture(true);
    write(dir.path(), "raw/edge.csv", b"0,1\n1,2\n\n2,3\n3,4\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::EmptyLine { line: 3, .. }), "{err}");
    assert_eq!(file_of(&err), "edge.csv.gz");
    write(
        dir.path(),
        "raw/edge.csv",
        b"0,1\n1,2\n2,3\n3,4\n\n\n",
        true,
    );
    assert_eq!(load(dir.path()).unwrap().graph.num_edges(), 8);
}

#[test]
fn malformed_meta_and_node_count() {
    let dir = fixture(true);
    std::fs::write(dir.path().join("meta.json"), b"{\"name\": 5").unwrap();
    let err = load(dir.path()).unwrap_err();
    assert!(matches!(err, LoadError::Meta { line: 1, .. }), "{err}");
    assert_eq!(file_of(&err), "meta.json");

    let dir = fixture(true);
    write(dir.path(), "raw/num-node-list.csv", b"5\n6\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::CountMismatch {
                expected: 1,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    write(dir.path(), "raw/num-node-list.csv", b"5000000000\n", true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(err, LoadError::TooManyNodes { line: 1, .. }),
        "{err}"
    );
}

#[test]
fn errors_in_large_files_name_the_exact_line() {
    // Large enough to be parsed in parallel pieces across several blocks.
    let n = 400_000u32;
    let mut edges = String::new();
    for i in 0..n - 1 {
        edges.push_str(&format!("{i},{}\n", i + 1));
    }
    let bad_line = 333_333u64;
    let text = edges
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i as u64 + 1 == bad_line {
                "12,oops".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dir = fixture(true);
    write(
        dir.path(),
        "raw/num-node-list.csv",
        format!("{n}\n").as_bytes(),
        true,
    );
    write(
        dir.path(),
        "raw/num-edge-list.csv",
        format!("{}\n", n - 1).as_bytes(),
        true,
    );
    std::fs::remove_file(dir.path().join("raw/node-feat.csv.gz")).unwrap();
    write(
        dir.path(),
        "raw/node-label.csv",
        "1\n".repeat(n as usize).as_bytes(),
        true,
    );
    write(dir.path(), "raw/edge.csv", edges.as_bytes(), true);
    let ds = load(dir.path()).unwrap();
    assert_eq!(ds.graph.num_edges(), 2 * (n as usize - 1));
    write(dir.path(), "raw/edge.csv", text.as_bytes(), true);
    let err = load(dir.path()).unwrap_err();
    assert!(
        matches!(err, LoadError::Parse { line, field: 2, .. } if line == bad_line),
        "{err}"
    );
}

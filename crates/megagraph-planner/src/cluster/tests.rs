//! Unit tests of cluster descriptions.

use super::*;

const GOOD: &str = r#"
name = "two-node"
device = "test gpu"
nodes = 2
devices_per_node = 4
memory_bytes_per_device = 80_000_000_000

[intra_node]
bandwidth_bytes_per_second = 300e9
latency_seconds = 5e-6

[inter_node]
bandwidth_bytes_per_second = 25e9
latency_seconds = 1e-5
"#;

#[test]
fn backward_waits_for_other_ranks_is_optional_and_must_be_a_boolean() {
    let spec = ClusterSpec::from_toml_str(GOOD, "good.toml").unwrap();
    assert!(!spec.backward_waits_for_other_ranks);
    let text = format!("backward_waits_for_other_ranks = true\n{GOOD}");
    let spec = ClusterSpec::from_toml_str(&text, "waits.toml").unwrap();
    assert!(spec.backward_waits_for_other_ranks);
    let text = format!("backward_waits_for_other_ranks = \"yes\"\n{GOOD}");
    match ClusterSpec::from_toml_str(&text, "bad.toml") {
        Err(ClusterError::Syntax { line, .. }) => assert_eq!(line, 1),
        other => panic!("expected a syntax error on line 1, got {other:?}"),
    }
}

#[test]
fn parses_a_valid_file() {
    let spec = ClusterSpec::from_toml_str(GOOD, "good.toml").unwrap();
    assert_eq!(spec.devices(), 8);
    assert_eq!(spec.memory_bytes_per_device, 80_000_000_000);
    assert_eq!(spec.compute, None);
    assert_eq!(spec.link_between(0, 3), (spec.intra_node, false));
    assert!(spec.link_between(3, 4).1);
    assert!((spec.intra_node.transfer_seconds(300e9) - (1.0 + 5e-6)).abs() < 1e-12);
}

#[test]
fn missing_field_names_table_and_line() {
    let text = GOOD.replace("latency_seconds = 1e-5\n", "");
    match ClusterSpec::from_toml_str(&text, "c.toml") {
        Err(ClusterError::MissingField { field, line, path }) => {
            assert_eq!(field, "inter_node.latency_seconds");
            assert_eq!(path, PathBuf::from("c.toml"));
            // The [inter_node] table's contents start on line 13.
            assert!(matches!(line, Some(12..=14)), "{line:?}");
        }
        other => panic!("expected MissingField, got {other:?}"),
    }
    let text = GOOD.replace("nodes = 2\n", "");
    let error = ClusterSpec::from_toml_str(&text, "c.toml").unwrap_err();
    assert_eq!(error.to_string(), "c.toml: missing field `nodes`");
}

#[test]
fn out_of_range_value_names_line_and_value() {
    let text = GOOD.replace(
        "bandwidth_bytes_per_second = 25e9",
        "bandwidth_bytes_per_second = -1.0",
    );
    match ClusterSpec::from_toml_str(&text, "c.toml") {
        Err(error @ ClusterError::InvalidValue { .. }) => {
            let ClusterError::InvalidValue {
                field, line, value, ..
            } = &error
            else {
                unreachable!()
            };
            assert_eq!(field, "inter_node.bandwidth_bytes_per_second");
            assert_eq!(*line, 13);
            assert_eq!(value, "-1");
            assert!(error.to_string().starts_with("c.toml:13: "), "{error}");
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    let text = GOOD.replace("nodes = 2", "nodes = 0");
    assert!(matches!(
        ClusterSpec::from_toml_str(&text, "c.toml"),
        Err(ClusterError::InvalidValue { line: 4, .. })
    ));
}

#[test]
fn wrong_type_and_unknown_key_are_syntax_errors_with_line() {
    let text = GOOD.replace("devices_per_node = 4", "devices_per_node = \"four\"");
    match ClusterSpec::from_toml_str(&text, "c.toml") {
        Err(ClusterError::Syntax { line, message, .. }) => {
            assert_eq!(line, 5, "{message}");
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    let text = GOOD.replace(
        "latency_seconds = 5e-6",
        "latency_seconds = 5e-6\nlatncy = 1",
    );
    match ClusterSpec::from_toml_str(&text, "c.toml") {
        Err(ClusterError::Syntax { line, message, .. }) => {
            assert_eq!(line, 11, "{message}");
            assert!(message.contains("latncy"), "{message}");
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
}

#[test]
fn file_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(
        &path,
        GOOD.replace("efficiency", "x")
            .replace("nodes = 2", "nodes = 2.5"),
    )
    .unwrap();
    let error = ClusterSpec::from_toml_file(&path).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("{}:4:", path.display())),
        "{text}"
    );
    let missing = dir.path().join("absent.toml");
    assert!(
        matches!(ClusterSpec::from_toml_file(&missing), Err(ClusterError::Io { path, .. }) if path == missing)
    );
}

#[test]
fn several_nodes_need_an_inter_node_link() {
    let text = GOOD.split("[inter_node]").next().unwrap();
    assert!(matches!(
        ClusterSpec::from_toml_str(text, "c.toml"),
        Err(ClusterError::MissingInterNode { nodes: 2, .. })
    ));
}

#[test]
fn first_devices_takes_part_of_a_node_or_whole_nodes() {
    let spec = ClusterSpec::from_toml_str(GOOD, "good.toml").unwrap();
    let two = spec.first_devices(2).unwrap();
    assert_eq!((two.nodes, two.devices_per_node), (1, 2));
    assert_eq!(spec.first_devices(8).unwrap(), spec);
    assert!(matches!(
        spec.first_devices(6),
        Err(ClusterError::BadSubset { requested: 6, .. })
    ));
    assert!(matches!(
        spec.first_devices(9),
        Err(ClusterError::BadSubset { .. })
    ));
}

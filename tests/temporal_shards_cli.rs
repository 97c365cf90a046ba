//! `megagraph temporal shards`: the cross-shard event ratio of both strategies per worker count
//! and window, as a table and JSON; clear errors.

use std::process::{Command, Output};

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph")).args(args).output().expect("run megagraph")
}

#[test]
fn shards_reports_every_worker_count_and_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shards.json");
    let output = megagraph(&[
        "temporal", "shards", "--synthetic-events", "4000", "--workers", "2,4", "--windows", "500,2000", "--json",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let (sequential, topology) = (row["sequential"].as_f64().unwrap(), row["topology"].as_f64().unwrap());
        assert!((0.0..=1.0).contains(&sequential) && (0.0..=1.0).contains(&topology), "{row}");
        assert!(topology < sequential, "topology-aware sharding cuts fewer events: {row}");
        assert!(row["topology_imbalance"].as_f64().unwrap() >= 1.0, "{row}");
    }
    assert_eq!(rows[3]["workers"], 4);
    assert_eq!(rows[3]["window"], 2000);
}

#[test]
fn zero_workers_is_a_clear_error() {
    let output = megagraph(&["temporal", "shards", "--synthetic-events", "100", "--workers", "0"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("workers") && !stderr.contains("panicked"), "{stderr}");
}

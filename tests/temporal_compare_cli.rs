//! `megagraph temporal compare` and `temporal train --workers N --scheme S`: the grid's rows
//! carry the fields, the report its counters; clear errors for bad worker flags.

use std::process::{Command, Output};

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph"))
        .args(args)
        .output()
        .expect("run megagraph")
}

const TINY: [&str; 10] = [
    "--synthetic-events",
    "600",
    "--epochs",
    "1",
    "--dim",
    "8",
    "--batch-size",
    "50",
    "--mrr-negatives",
    "0",
];

#[test]
fn compare_writes_one_row_per_scheme_and_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("compare.json");
    let mut args = vec![
        "temporal",
        "compare",
        "--model",
        "tgn",
        "--workers",
        "1,2",
        "--schemes",
        "minibatch,epoch,memory,depbloom",
        "--json",
        out.to_str().unwrap(),
    ];
    args.extend(TINY);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("| scheme | workers | events/s |"));
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 8);
    let single_ap = rows[0]["test_ap"].as_f64().unwrap();
    for row in rows {
        let workers = row["workers"].as_u64().unwrap() as usize;
        for field in [
            "events_per_second",
            "test_ap",
            "sync_bytes_per_epoch",
            "critical_path_seconds_per_batch",
        ] {
            assert!(
                row[field].as_f64().is_some_and(|v| v.is_finite() && v >= 0.0),
                "{field}: {row}"
            );
        }
        assert!(row["events_per_second"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["events_per_worker"].as_array().unwrap().len(), workers, "{row}");
        let synced = row["sync_bytes_per_epoch"].as_f64().unwrap();
        let scheme = row["scheme"].as_str().unwrap();
        if workers == 1 {
            assert_eq!(synced, 0.0, "{row}");
            // every scheme at one worker is single-worker training
            assert_eq!(row["test_ap"].as_f64().unwrap(), single_ap, "{row}");
        } else {
            assert_eq!(synced > 0.0, scheme != "memory", "{row}");
        }
    }
}

#[test]
fn train_reports_the_workers_counters() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.json");
    let mut args = vec![
        "temporal",
        "train",
        "--workers",
        "2",
        "--scheme",
        "depbloom",
        "--window",
        "200",
        "--refine",
        "2",
        "--metrics-out",
        out.to_str().unwrap(),
    ];
    args.extend(TINY);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(report["scheme"], "depbloom");
    assert_eq!(report["workers"], 2);
    assert!(report["sync_bytes_per_epoch"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        report["critical_path_seconds_per_batch"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert_eq!(report["events_per_worker"].as_array().unwrap().len(), 2);
}

/// `--no-critical-path` writes every memory write-back at once: DepBloom's numbers stay the
/// same to the bit (one worker: no dropout order between workers to vary), the report says
/// which way it ran.
#[test]
fn no_critical_path_changes_no_number() {
    let dir = tempfile::tempdir().unwrap();
    let reports: Vec<serde_json::Value> = [false, true]
        .into_iter()
        .map(|off| {
            let out = dir.path().join(format!("report-{off}.json"));
            let mut args = vec![
                "temporal",
                "train",
                "--workers",
                "1",
                "--scheme",
                "depbloom",
                "--metrics-out",
                out.to_str().unwrap(),
            ];
            args.extend(TINY);
            if off {
                args.push("--no-critical-path");
            }
            let output = megagraph(&args);
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(reports[0]["critical_path"], true);
    assert_eq!(reports[1]["critical_path"], false);
    let losses = |r: &serde_json::Value| {
        r["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["loss"].as_f64(), e["valid_ap"].as_f64()))
            .collect::<Vec<_>>()
    };
    assert_eq!(losses(&reports[0]), losses(&reports[1]));
    assert_eq!(reports[0]["test_ap"], reports[1]["test_ap"]);
}

#[test]
fn several_workers_without_a_scheme_is_a_clear_error() {
    let mut args = vec!["temporal", "train", "--workers", "2"];
    args.extend(TINY);
    let output = megagraph(&args);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scheme") && !stderr.contains("panicked"), "{stderr}");
    let output = megagraph(&["temporal", "train", "--workers", "2", "--scheme", "ring"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("depbloom"));
}

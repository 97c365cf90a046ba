//! `megagraph temporal train`: metrics JSON, exact resume after `kill -9`, clear errors.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TINY: &[&str] = &[
    "temporal", "train", "--synthetic-events", "1500", "--dim", "8", "--batch-size", "100", "--lr", "1e-3",
    "--mrr-negatives", "4",
];

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph")).args(args).output().expect("run megagraph")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn metrics(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display())))
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn temporal_train_writes_metrics_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("metrics.json");
    let mut args = TINY.to_vec();
    args.extend(["--model", "jodie", "--epochs", "2", "--metrics-out", out.to_str().unwrap()]);
    args.extend(["--plot", dir.path().to_str().unwrap()]);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("test       AP"));
    let json = metrics(&out);
    for field in ["test_ap", "test_auc", "test_mrr", "best_valid_ap", "best_epoch", "events_per_second", "history"] {
        assert!(json.get(field).is_some(), "metrics lack {field}: {json}");
    }
    let history = json["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    for key in ["loss", "valid_ap", "seconds"] {
        assert!(history[1][key].is_number(), "history lacks {key}: {json}");
    }
    assert!(dir.path().join("loss.svg").is_file() && dir.path().join("ap.svg").is_file());
}

/// The figures a run's metrics hold, less its timings.
fn outcome(json: &serde_json::Value) -> String {
    let mut json = json.clone();
    for field in ["events_per_second", "train_seconds", "critical_path_seconds_per_batch"] {
        json[field] = serde_json::Value::Null;
    }
    for epoch in json["history"].as_array_mut().unwrap() {
        epoch["seconds"] = serde_json::Value::Null;
    }
    json.to_string()
}

#[test]
fn temporal_train_killed_and_resumed_equals_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, resumed) = (dir.path().join("whole.json"), dir.path().join("resumed.json"));
    let checkpoints = dir.path().join("checkpoints");
    let mut args = TINY.to_vec();
    args.extend(["--model", "tgn", "--epochs", "4", "--patience", "4"]);
    let mut run = args.clone();
    run.extend(["--metrics-out", whole.to_str().unwrap()]);
    let output = megagraph(&run);
    assert!(output.status.success(), "{}", stderr(&output));

    let mut killed = args.clone();
    killed.extend(["--checkpoint-dir", checkpoints.to_str().unwrap()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_megagraph")).args(&killed).spawn().expect("run megagraph");
    // kill -9 once the first epoch is checkpointed: wherever the run then is, resuming must
    // give what the uninterrupted run gave
    let started = Instant::now();
    while !checkpoints.join("LATEST").exists() && started.elapsed() < Duration::from_secs(120) {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut resume = killed.clone();
    resume.extend(["--resume", "--metrics-out", resumed.to_str().unwrap()]);
    let output = megagraph(&resume);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(outcome(&metrics(&resumed)), outcome(&metrics(&whole)));
}

#[test]
fn temporal_data_errors_name_the_file_line_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let output = megagraph(&["temporal", "train", "--dataset", dir.path().to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("edges.csv"), "{}", stderr(&output));
    std::fs::write(dir.path().join("edges.csv"), "src,dst,time,label\n0,1,1.0,0\n1,x,2.0,0\n").unwrap();
    let output = megagraph(&["temporal", "train", "--dataset", dir.path().to_str().unwrap()]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("edges.csv:3") && message.contains("\"x\""), "{message}");
}

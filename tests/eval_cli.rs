//! `megagraph eval --seeds N`: N seeds of one tiny synthetic configuration, their table and JSON.

use std::process::{Command, Output};

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph"))
        .args(args)
        .env(
            "MEGAGRAPH_CACHE",
            std::env::temp_dir().join("megagraph-eval-test-cache"),
        )
        .output()
        .expect("run megagraph")
}

const TINY: &[&str] = &[
    "--layers",
    "1",
    "--heads",
    "2",
    "--hidden",
    "16",
    "--ffn-hidden",
    "16",
    "--seq-len",
    "64",
];

fn tiny_config(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("tiny.toml");
    std::fs::write(
        &config,
        "[synthetic]\nnodes = 300\nclasses = 3\nfeature_dim = 16\n",
    )
    .unwrap();
    config
}

#[test]
fn eval_trains_each_seed_and_writes_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_config(dir.path());
    let json_path = dir.path().join("eval.json");
    let mut args = vec![
        "eval",
        "--config",
        config.to_str().unwrap(),
        "--seeds",
        "3",
        "--seed",
        "4",
        "--epochs",
        "2",
    ];
    args.extend_from_slice(TINY);
    args.extend_from_slice(&["--json", json_path.to_str().unwrap()]);
    let output = megagraph(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("test accuracy") && stdout.contains("±"),
        "{stdout}"
    );

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let runs = json["runs"].as_array().expect("runs");
    assert_eq!(
        runs.iter().map(|r| r["seed"].as_u64()).collect::<Vec<_>>(),
        [Some(4), Some(5), Some(6)],
        "{json}"
    );
    for run in runs {
        for field in ["test_accuracy", "best_valid_accuracy", "best_epoch"] {
            assert!(run[field].is_number(), "a run lacks {field}: {json}");
        }
        assert!(
            (1..=2).contains(&run["best_epoch"].as_u64().unwrap()),
            "{json}"
        );
    }
    // the summary is the mean and sample std of the runs it lists
    let tests: Vec<f64> = runs
        .iter()
        .map(|r| r["test_accuracy"].as_f64().unwrap())
        .collect();
    let mean = tests.iter().sum::<f64>() / 3.0;
    let std = (tests.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    assert!(
        (json["test_accuracy_mean"].as_f64().unwrap() - mean).abs() < 1e-12,
        "{json}"
    );
    assert!(
        (json["test_accuracy_std"].as_f64().unwrap() - std).abs() < 1e-12,
        "{json}"
    );
    for field in ["valid_accuracy_mean", "seconds_per_epoch_mean"] {
        assert!(
            json[field].as_f64().is_some_and(|v| v > 0.0),
            "{field}: {json}"
        );
    }

    // each seed is the run `megagraph train --seed S` makes
    let metrics = dir.path().join("train.json");
    let mut train = vec![
        "train",
        "--config",
        config.to_str().unwrap(),
        "--seed",
        "5",
        "--epochs",
        "2",
    ];
    train.extend_from_slice(TINY);
    train.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
    let output = megagraph(&train);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trained: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert_eq!(
        trained["test_accuracy"], runs[1]["test_accuracy"],
        "{trained}"
    );
    assert_eq!(
        trained["best_valid_accuracy"], runs[1]["best_valid_accuracy"],
        "{trained}"
    );
}

#[test]
fn eval_refuses_zero_seeds_naming_the_flag() {
    let output = megagraph(&["eval", "--seeds", "0"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--seeds"), "{stderr}");
}

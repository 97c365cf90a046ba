//! `megagraph tune`: a search killed after some trials and run again continues where it stopped
//! (the journaled trials are not rerun) and ends with the result of an uninterrupted search.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn megagraph() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_megagraph"));
    command.env(
        "MEGAGRAPH_CACHE",
        std::env::temp_dir().join("megagraph-tune-test-cache"),
    );
    command
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
    "--epochs",
    "3",
];

/// A small synthetic base config (a trial takes about 0.3 s) and an 8-trial random space over it.
fn search_files(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("base.toml"),
        "[synthetic]\nnodes = 1200\nclasses = 3\nfeature_dim = 16\n",
    )
    .unwrap();
    let space = dir.join("space.toml");
    std::fs::write(
        &space,
        "[search]\nstrategy = \"random\"\ntrials = 8\nseed = 5\nbase = \"base.toml\"\n[params]\n\
         \"optimizer.lr\" = { min = 1e-3, max = 3e-2, log = true }\n\"model.dropout\" = { values = [0.0, 0.3] }\n",
    )
    .unwrap();
    space
}

fn tune_args<'a>(space: &'a Path, out: &'a Path) -> Vec<&'a str> {
    let mut args = vec![
        "tune",
        "--space",
        space.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(TINY);
    args
}

fn run(args: &[&str]) -> Output {
    let output = megagraph().args(args).output().expect("run megagraph");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn finished_trials(journal: &Path) -> usize {
    std::fs::read(journal)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|json| json["trials"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// The trials of a summary without what differs between runs (process id, timings).
fn results(summary: &serde_json::Value) -> Vec<serde_json::Value> {
    summary["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let runs: Vec<_> = t["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    serde_json::json!([
                        r["seed"],
                        r["test_accuracy"],
                        r["best_valid_accuracy"],
                        r["best_epoch"]
                    ])
                })
                .collect();
            serde_json::json!([
                t["index"],
                t["params"],
                t["valid_accuracy"],
                t["test_accuracy"],
                runs
            ])
        })
        .collect()
}

#[test]
fn a_tune_resumed_after_a_kill_continues_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let space = search_files(dir.path());

    // uninterrupted
    let whole = dir.path().join("whole");
    let output = run(&tune_args(&space, &whole));
    assert!(String::from_utf8_lossy(&output.stdout).contains("best config written"));
    let expected = json(&whole.join("summary.json"));
    assert_eq!(
        expected["trials"].as_array().map(Vec::len),
        Some(8),
        "{expected}"
    );
    assert_eq!(expected["resumed_trials"], 0);

    // killed (SIGKILL) once two trials are in the journal
    let resumed = dir.path().join("resumed");
    let journal = resumed.join("trials.json");
    let mut child = megagraph()
        .args(tune_args(&space, &resumed))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start megagraph tune");
    let first_pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while finished_trials(&journal) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("kill megagraph tune");
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the search finished before it was killed"
    );
    let done = finished_trials(&journal);
    assert!(
        (2..8).contains(&done),
        "{done} trials finished before the kill"
    );
    assert!(!resumed.join("summary.json").exists());

    // the same arguments again: the journaled trials are read, not rerun
    let output = run(&tune_args(&space, &resumed));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("from the journal").count(), done, "{stderr}");
    let summary = json(&resumed.join("summary.json"));
    assert_eq!(summary["resumed_trials"], done);
    let pids: Vec<u64> = summary["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["pid"].as_u64().unwrap())
        .collect();
    let journaled: Vec<usize> = (0..8)
        .filter(|&i| pids[i] == u64::from(first_pid))
        .collect();
    assert_eq!(
        journaled,
        (0..done).collect::<Vec<_>>(),
        "trials run by the killed process: {pids:?}"
    );
    assert!(pids[done..].iter().all(|&pid| pid != u64::from(first_pid)));

    // and the result is the uninterrupted one
    assert_eq!(results(&summary), results(&expected));
    assert_eq!(summary["best"]["index"], expected["best"]["index"]);
    let best = std::fs::read_to_string(resumed.join("best.toml")).unwrap();
    assert_eq!(
        best,
        std::fs::read_to_string(whole.join("best.toml")).unwrap()
    );
    assert!(
        std::fs::read_to_string(resumed.join("trials.svg"))
            .unwrap()
            .starts_with("<svg")
    );

    // best.toml is a config `train --config` runs, with the best trial's parameters
    let metrics = dir.path().join("best.json");
    let best_config = resumed.join("best.toml");
    run(&[
        "train",
        "--config",
        best_config.to_str().unwrap(),
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let trained = json(&metrics);
    let best_run = &summary["best"]["runs"][0];
    assert_eq!(
        trained["best_valid_accuracy"], best_run["best_valid_accuracy"],
        "{trained}"
    );
    assert_eq!(
        trained["test_accuracy"], best_run["test_accuracy"],
        "{trained}"
    );
}

#[test]
fn a_journal_of_another_search_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let space = search_files(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("trials.json"),
        "{\"fingerprint\": \"0000\", \"trials\": []}",
    )
    .unwrap();
    let output = megagraph().args(tune_args(&space, &out)).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("trials.json") && stderr.contains("another"),
        "{stderr}"
    );
}

//! The `megagraph` binary: training end to end, metrics JSON, and clear errors on bad input.

use std::process::{Command, Output};

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph"))
        .args(args)
        .env("MEGAGRAPH_CACHE", std::env::temp_dir().join("megagraph-cli-test-cache"))
        .output()
        .expect("run megagraph")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const TINY: &[&str] = &["--layers", "1", "--heads", "2", "--hidden", "16", "--ffn-hidden", "16", "--seq-len", "64"];

#[test]
fn train_writes_metrics_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.json");
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, "[synthetic]\nnodes = 300\nclasses = 3\nfeature_dim = 16\n").unwrap();
    let mut args = vec!["train", "--config", config.to_str().unwrap(), "--epochs", "3"];
    args.extend_from_slice(TINY);
    args.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("test accuracy"), "{stdout}");

    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    for field in [
        "dataset", "nodes", "edges", "params", "epochs_run", "best_epoch", "best_valid_accuracy",
        "test_accuracy", "train_seconds", "seconds_per_epoch", "peak_rss_bytes", "history",
    ] {
        assert!(json.get(field).is_some(), "metrics lack {field}: {json}");
    }
    assert_eq!(json["nodes"], 300);
    let history = json["history"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    for key in ["loss", "train_accuracy", "valid_accuracy", "seconds"] {
        assert!(history[0][key].is_number(), "history lacks {key}");
    }
}

#[test]
fn max_steps_stops_a_power_law_run_after_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.json");
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, "[synthetic]\nkind = \"power_law\"\nnodes = 300\nclasses = 3\nfeature_dim = 16\n").unwrap();
    let mut args = vec!["train", "--config", config.to_str().unwrap(), "--epochs", "3", "--max-steps", "1"];
    args.extend_from_slice(TINY);
    args.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert_eq!((json["dataset"].as_str(), json["steps"].as_u64()), (Some("power_law"), Some(1)), "{json}");
    assert_eq!(json["epochs_run"], 1, "{json}");
    assert_eq!(json["history"].as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn a_missing_dataset_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    // Everything but raw/edge.csv.
    write("raw/num-node-list.csv", "3\n");
    write("raw/node-label.csv", "0\n1\n0\n");
    for split in ["train", "valid", "test"] {
        write(&format!("split/s/{split}.csv"), "0\n");
    }
    let output = megagraph(&["train", "--dataset", dir.path().to_str().unwrap(), "--no-cache"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("edge.csv"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_bad_config_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[training]\nepochs = 2\nseed = \"zero\"\n").unwrap();
    let output = megagraph(&["train", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("bad.toml") && err.contains("line 3"), "{err}");
}

#[test]
fn an_out_of_range_flag_is_refused_before_training() {
    let output = megagraph(&["train", "--dropout", "2"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("model.dropout"), "{}", stderr(&output));
}

#[test]
fn train_runs_a_mesh_and_a_plan_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    // 8 sequences of 64 nodes, steps of 4; the single-device run turns off what a mesh leaves
    // off when unset (the propagation of the logits, the consistency regularization)
    std::fs::write(&config, "[synthetic]\nnodes = 512\nclasses = 3\nfeature_dim = 8\n").unwrap();
    let base = ["train", "--config", config.to_str().unwrap(), "--epochs", "2", "--layers", "2", "--heads", "2",
        "--hidden", "8", "--ffn-hidden", "8", "--seq-len", "64", "--dropout", "0", "--input-dropout", "0",
        "--key-dropout", "0", "--propagation-steps", "0", "--consistency-weight", "0"];
    let run = |extra: &[&str]| {
        let metrics = dir.path().join(format!("m{}.json", extra.len()));
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
        let output = megagraph(&args);
        assert!(output.status.success(), "{extra:?}: {}", stderr(&output));
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
        let losses: Vec<f64> = json["history"].as_array().unwrap().iter().map(|m| m["loss"].as_f64().unwrap()).collect();
        (String::from_utf8_lossy(&output.stdout).into_owned(), losses)
    };
    let (_, single) = run(&[]);
    let (stdout, mesh) = run(&["--pp", "2", "--cp", "2", "--micro-batches", "2", "--stage-layers", "1,1"]);
    assert!(stdout.contains("pp=2 cp=2 dp=1 (4 workers)"), "{stdout}");
    let plan = dir.path().join("plan.json");
    std::fs::write(&plan, r#"{"best": {"pp": 1, "cp": 1, "dp": 2, "micro_batches": 2, "stage_layers": [2]}}"#).unwrap();
    let (stdout, planned) = run(&["--plan", plan.to_str().unwrap()]);
    assert!(stdout.contains("pp=1 cp=1 dp=2 (2 workers)"), "{stdout}");
    for losses in [&mesh, &planned] {
        for (a, b) in losses.iter().zip(&single) {
            assert!((a - b).abs() <= 1e-5 * b.abs(), "{losses:?} vs single device {single:?}");
        }
    }
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the child when dropped (a failed assertion must not leave processes behind).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits at most `seconds` for `child`; `None` when it is still running.
fn wait_for(child: &mut std::process::Child, seconds: u64) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

#[test]
fn two_node_processes_train_like_one_process_with_their_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, "[synthetic]\nnodes = 512\nclasses = 3\nfeature_dim = 8\n").unwrap();
    let common = ["train", "--config", config.to_str().unwrap(), "--epochs", "2", "--layers", "2", "--heads", "2",
        "--hidden", "8", "--ffn-hidden", "8", "--seq-len", "64", "--dropout", "0", "--input-dropout", "0",
        "--key-dropout", "0"];
    let losses = |path: &std::path::Path| -> Vec<f64> {
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        json["history"].as_array().unwrap().iter().map(|m| m["loss"].as_f64().unwrap()).collect()
    };
    let one = dir.path().join("one.json");
    let mut args = common.to_vec();
    args.extend_from_slice(&["--dp", "2", "--metrics-out", one.to_str().unwrap()]);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));

    let spawn = |extra: &[String]| {
        let child = Command::new(env!("CARGO_BIN_EXE_megagraph"))
            .args(extra)
            .env("MEGAGRAPH_CACHE", dir.path().join("cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Reaped(child)
    };
    let orchestrator = free_port();
    let _orchestrator = spawn(&["orchestrator".into(), "--port".into(), orchestrator.to_string()]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let two = dir.path().join("two.json");
    let node = |rank: usize, metrics: Option<&std::path::Path>| {
        let mut args: Vec<String> = common.iter().map(|a| a.to_string()).collect();
        args.extend([
            "--nodes".into(), "2".into(), "--node-rank".into(), rank.to_string(),
            "--orchestrator".into(), format!("127.0.0.1:{orchestrator}"),
            "--node-address".into(), format!("127.0.0.1:{}", free_port()),
        ]);
        if let Some(path) = metrics {
            args.extend(["--metrics-out".into(), path.display().to_string()]);
        }
        spawn(&args)
    };
    let mut nodes = [node(0, Some(&two)), node(1, None)];
    for (rank, node) in nodes.iter_mut().enumerate() {
        let status = wait_for(&mut node.0, 120).unwrap_or_else(|| panic!("node {rank} did not finish"));
        assert!(status.success(), "node {rank}: {status}");
    }
    let (one, two) = (losses(&one), losses(&two));
    assert_eq!(one.len(), 2);
    for (a, b) in two.iter().zip(&one) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "two nodes {two:?} vs one process with dp = 2 {one:?}");
    }
}

#[test]
fn an_impossible_layout_is_refused_with_the_reason() {
    let output = megagraph(&["train", "--dp", "3", "--epochs", "1"]);
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(text.contains("mesh.dp") && text.contains("does not divide"), "{text}");
}

#[test]
fn help_lists_the_subcommands_and_flags() {
    let output = megagraph(&["--help"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("train"));
    let output = megagraph(&["train", "--help"]);
    let text = String::from_utf8_lossy(&output.stdout);
    for flag in ["--dataset", "--config", "--seed", "--epochs", "--seq-len", "--layers", "--heads", "--hidden",
        "--dropout", "--metrics-out", "--checkpoint-dir", "--resume", "--pp", "--cp", "--dp", "--micro-batches",
        "--stage-layers", "--plan"] {
        assert!(text.contains(flag), "train --help lacks {flag}");
    }
}

#[test]
fn profile_caches_and_plan_validates_with_a_measured_profile() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let shape = [
        "--layers", "2", "--heads", "2", "--hidden", "16", "--ffn-hidden", "16", "--feature-dim", "8", "--classes", "3",
    ];
    let profiling = [
        "--cache-dir", cache.to_str().unwrap(), "--rows", "16,32,64", "--blocks", "8,16,32", "--repeats", "1", "--warmup",
        "1",
    ];
    let mut args = vec!["profile", "--cluster", "configs/clusters/cpu-local.toml"];
    args.extend_from_slice(&shape);
    args.extend_from_slice(&profiling);
    let first = megagraph(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("measured and cached") && stdout.contains("layer_dense"), "{stdout}");
    // the 2 workers of cpu-local: each part timed alone too
    assert!(stdout.contains("alone on the machine (time alone / time with 2 copies computing)"), "{stdout}");
    let second = megagraph(&args);
    assert!(String::from_utf8_lossy(&second.stdout).contains("read from the cache"));

    let json = dir.path().join("plan.json");
    let mut args = vec![
        "plan", "--cluster", "configs/clusters/cpu-local.toml", "--seq-len", "32", "--sequences-per-step", "4",
        "--profile", "measured", "--validate", "--validate-top", "2", "--validate-steps", "1", "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(&shape);
    args.extend_from_slice(&profiling);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("median |error|"));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let validated = report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|plan| plan.get("measured_step_seconds").is_some() && plan.get("measured_peak_bytes_per_device").is_some())
        .count();
    assert_eq!(validated, 2, "{report}");
    assert_eq!(report["validation"]["plans"].as_array().map(Vec::len), Some(2));
    // the profile measured again before the validation and after its one round
    assert!(String::from_utf8_lossy(&output.stdout).contains("with the profile measured in turn"));
    assert_eq!(report["validation"]["in_turn_profile"]["sessions"], 2, "{report}");
    assert_eq!(report["validation"]["in_turn_profile"]["solo"]["copies"], 2, "{report}");
    // one session before the validation's start (a negative time), one after its round
    let in_turn = &report["validation"]["in_turn_profile"];
    let times: Vec<f64> = in_turn["session_times"].as_array().unwrap().iter().filter_map(|t| t.as_f64()).collect();
    assert!(times.len() == 2 && times[0] < 0.0 && times[1] > 0.0, "{in_turn}");
    assert_eq!(in_turn["session_time_factors"].as_array().map(Vec::len), Some(2), "{in_turn}");
    for plan in report["validation"]["plans"].as_array().unwrap() {
        assert!(plan["in_turn_predicted_step_seconds"].as_f64().is_some_and(|s| s > 0.0), "{plan}");
        let steps = plan["step_times"].as_array().unwrap();
        assert_eq!(steps.len(), plan["step_seconds"].as_array().unwrap().len(), "{plan}");
        assert!(steps.iter().all(|t| t.as_f64().is_some_and(|t| t > 0.0 && t < times[1])), "{plan}");
    }
    let svg = std::fs::read_to_string(json.with_extension("svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{svg}");
}

#[test]
fn a_negative_validation_time_is_an_error_naming_the_flag() {
    let output = megagraph(&[
        "plan", "--cluster", "configs/clusters/cpu-local.toml", "--validate", "--validate-seconds=-1",
    ]);
    assert!(!output.status.success());
    let text = stderr(&output);
    assert!(text.contains("validate-seconds") && text.contains("-1"), "{text}");
}

#[test]
fn a_plan_made_with_default_flags_runs_with_train_default_flags() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let output = megagraph(&[
        "plan", "--cluster", "configs/clusters/cpu-local.toml", "--json", plan.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // the same model, sequence length and batch: the layout fits, and one step runs
    let output = megagraph(&["train", "--plan", plan.to_str().unwrap(), "--epochs", "1", "--max-steps", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("mesh: pp=") && stdout.contains("test accuracy"), "{stdout}");
}

#[test]
fn a_ulysses_plan_trains_with_ulysses_unless_cp_mode_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    // one layer and one sequence per step on 2 workers: the only layout is cp = 2
    let output = megagraph(&[
        "plan", "--cluster", "configs/clusters/cpu-local.toml", "--layers", "1", "--heads", "2", "--hidden", "16",
        "--ffn-hidden", "16", "--seq-len", "64", "--sequences-per-step", "1", "--cp-mode", "ulysses", "--json",
        plan.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Context mode: ulysses: asked for"));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    assert_eq!((json["best"]["cp"].as_u64(), json["best"]["cp_mode"].as_str()), (Some(2), Some("ulysses")));
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--synthetic", "--plan", plan.to_str().unwrap(), "--batch-size", "1", "--epochs",
            "1", "--max-steps", "1"];
        args.extend_from_slice(TINY);
        args.extend_from_slice(extra);
        let output = megagraph(&args);
        assert!(output.status.success(), "{extra:?}: {}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let stdout = train(&[]);
    assert!(stdout.contains("pp=1 cp=2 dp=1") && stdout.contains("cp_mode ulysses"), "{stdout}");
    let stdout = train(&["--cp-mode", "ring"]);
    assert!(stdout.contains("cp_mode ring"), "{stdout}");
}

#[test]
fn resume_uses_the_checkpoint_directory_of_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    let checkpoints = dir.path().join("ckpt");
    std::fs::write(
        &config,
        format!(
            "[synthetic]\nnodes = 300\nclasses = 3\nfeature_dim = 16\n[training]\ncheckpoint_dir = {:?}\n",
            checkpoints.to_str().unwrap()
        ),
    )
    .unwrap();
    let run = |epochs: &str, resume: bool| {
        let mut args = vec!["train", "--config", config.to_str().unwrap(), "--epochs", epochs];
        args.extend_from_slice(TINY);
        if resume {
            args.push("--resume");
        }
        let output = Command::new(env!("CARGO_BIN_EXE_megagraph"))
            .args(&args)
            .env("MEGAGRAPH_CACHE", dir.path().join("cache"))
            .env("RUST_LOG", "info")
            .output()
            .expect("run megagraph");
        assert!(output.status.success(), "{}", stderr(&output));
        stderr(&output)
    };
    run("1", false);
    assert!(checkpoints.read_dir().unwrap().next().is_some(), "no checkpoint written");
    let resumed = run("2", true);
    assert!(resumed.contains("resuming after epoch 1"), "{resumed}");
}

#[test]
fn torchgt_attention_modes_and_ulysses_train_on_the_synthetic_default() {
    // the default synthetic graph (2000 nodes), two steps of each mode
    let runs: [&[&str]; 4] = [
        &["--attention", "sparse"],
        &["--attention", "interleaved", "--switch-freq", "2", "--reorder"],
        &["--attention", "sparse", "--reorder", "--block-reform", "--reform-threshold", "tuned"],
        &["--cp", "2", "--cp-mode", "ulysses"],
    ];
    for extra in runs {
        let mut args = vec!["train", "--synthetic", "--epochs", "1", "--max-steps", "2"];
        args.extend_from_slice(TINY);
        args.extend_from_slice(extra);
        let output = megagraph(&args);
        assert!(output.status.success(), "{extra:?}: {}", stderr(&output));
        assert!(String::from_utf8_lossy(&output.stdout).contains("test accuracy"), "{extra:?}");
    }
    let mut args = vec!["train", "--synthetic", "--epochs", "1", "--max-steps", "1", "--attention", "sparse", "--dp", "2"];
    args.extend_from_slice(TINY);
    let output = megagraph(&args);
    assert!(!output.status.success() && stderr(&output).contains("attention.mode"), "{}", stderr(&output));
    let mut args = vec!["train", "--synthetic", "--epochs", "1", "--block-reform"];
    args.extend_from_slice(TINY);
    let output = megagraph(&args);
    assert!(!output.status.success() && stderr(&output).contains("attention.block_reform"), "{}", stderr(&output));
}

#[test]
fn the_graph_token_trains_checkpoints_resumes_and_is_refused_on_a_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(&config, "[synthetic]\nnodes = 300\nclasses = 3\nfeature_dim = 16\n").unwrap();
    let checkpoints = dir.path().join("checkpoints");
    let metrics = dir.path().join("metrics.json");
    for (epochs, resume) in [("1", false), ("2", true)] {
        let mut args = vec!["train", "--config", config.to_str().unwrap(), "--epochs", epochs, "--graph-token"];
        args.extend_from_slice(&["--checkpoint-dir", checkpoints.to_str().unwrap()]);
        args.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
        if resume {
            args.push("--resume");
        }
        args.extend_from_slice(TINY);
        let output = megagraph(&args);
        assert!(output.status.success(), "{epochs} epochs: {}", stderr(&output));
        assert!(String::from_utf8_lossy(&output.stdout).contains("test accuracy"));
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert_eq!(json["epochs_run"], 2, "{json}");
    // sparse and interleaved attention carry the token on one device; a mesh still refuses it
    for attention in ["sparse", "interleaved"] {
        let mut args = vec!["train", "--synthetic", "--epochs", "1", "--graph-token", "--attention", attention];
        args.extend_from_slice(TINY);
        let output = megagraph(&args);
        assert!(output.status.success(), "{attention}: {}", stderr(&output));
    }
    for extra in [&[][..], &["--attention", "sparse"][..]] {
        let mut args = vec!["train", "--synthetic", "--epochs", "1", "--graph-token", "--cp", "2"];
        args.extend_from_slice(extra);
        args.extend_from_slice(TINY);
        let output = megagraph(&args);
        assert!(!output.status.success() && stderr(&output).contains("model.graph_token"), "{}", stderr(&output));
    }
}

#[test]
fn the_edge_encoding_trains_on_edge_features_and_is_refused_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edges.toml");
    std::fs::write(&config, "[synthetic]\nnodes = 300\nclasses = 3\nfeature_dim = 16\nedge_feature_dim = 4\n").unwrap();
    let metrics = dir.path().join("metrics.json");
    let mut args = vec!["train", "--config", config.to_str().unwrap(), "--epochs", "1", "--edge-encoding"];
    args.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
    args.extend_from_slice(TINY);
    let output = megagraph(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("test accuracy"));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert_eq!(json["epochs_run"], 1, "{json}");
    // with the graph token too
    args.push("--graph-token");
    let output = megagraph(&args);
    assert!(output.status.success(), "with the graph token: {}", stderr(&output));
    // the built-in graph has no edge features; a context-parallel ring is refused
    for extra in [&[][..], &["--cp", "2"][..]] {
        let mut args = vec!["train", "--synthetic", "--epochs", "1", "--edge-encoding"];
        args.extend_from_slice(extra);
        args.extend_from_slice(TINY);
        let output = megagraph(&args);
        assert!(!output.status.success() && stderr(&output).contains("model.edge_encoding"), "{extra:?}: {}", stderr(&output));
    }
}

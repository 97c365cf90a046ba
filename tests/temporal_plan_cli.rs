//! `megagraph temporal plan`: a profile measured on a small synthetic stream, the plan's JSON
//! fields, an explanation that names the choice, a saved profile planned again, clear errors.

use std::process::{Command, Output};

fn megagraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megagraph"))
        .args(args)
        .output()
        .expect("run megagraph")
}

#[test]
fn plan_measures_a_profile_and_explains_its_choice() {
    let dir = tempfile::tempdir().unwrap();
    let (plan_path, profile_path) = (dir.path().join("plan.json"), dir.path().join("profile.json"));
    let output = megagraph(&[
        "temporal",
        "plan",
        "--synthetic-events",
        "3000",
        "--model",
        "tgn",
        "--workers",
        "2",
        "--batch-size",
        "200",
        "--dim",
        "16",
        "--refine-counts",
        "1,2,4",
        "--batches",
        "2",
        "--json",
        plan_path.to_str().unwrap(),
        "--profile-out",
        profile_path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan_path).unwrap()).unwrap();
    for field in [
        "window",
        "refine",
        "predicted",
        "refine_reason",
        "refine_candidates",
        "window_candidates",
    ] {
        assert!(plan.get(field).is_some(), "{field}: {plan}");
    }
    let (window, refine) = (plan["window"].as_u64().unwrap(), plan["refine"].as_u64().unwrap());
    assert!([1, 2, 4].contains(&refine), "{plan}");
    // the default windows: 1, 2 and 4 × 2 workers × 200 events within the 2100 training events
    let windows: Vec<u64> = plan["window_candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sample"]["window"].as_u64().unwrap())
        .collect();
    assert_eq!(windows, [400, 800, 1600]);
    assert!(windows.contains(&window));
    for field in [
        "epoch_seconds",
        "compute_seconds",
        "sync_seconds",
        "reconcile_seconds",
        "staleness",
    ] {
        assert!(
            plan["predicted"][field].as_f64().is_some_and(|v| v >= 0.0),
            "{field}: {plan}"
        );
    }
    assert!(plan["predicted"]["epoch_seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(plan["refine_candidates"].as_array().unwrap().len(), 3);
    assert!(
        stdout.contains(&format!("--window {window} --refine {refine}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Refine {refine}:")) && stdout.contains(&format!("Window {window}:")),
        "{stdout}"
    );
    // the saved profile plans the same again, without measuring
    let again = megagraph(&["temporal", "plan", "--profile", profile_path.to_str().unwrap()]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8_lossy(&again.stdout), stdout);
}

#[test]
fn depbloom_training_plans_an_auto_window_and_refinement_first() {
    let output = megagraph(&[
        "temporal",
        "train",
        "--synthetic-events",
        "1500",
        "--dim",
        "8",
        "--batch-size",
        "100",
        "--mrr-negatives",
        "0",
        "--epochs",
        "1",
        "--workers",
        "2",
        "--scheme",
        "depbloom",
        "--window",
        "auto",
        "--refine",
        "auto",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("DepBloom plan for tgn on synthetic (2 workers, batches of 100 events"),
        "{stderr}"
    );
    assert!(stderr.contains("<- chosen") && stderr.contains("epoch   1"), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("workers    2 (depbloom)"));
}

#[test]
fn impossible_requests_are_clear_errors() {
    for (args, word) in [
        (vec!["--workers", "0"], "workers"),
        (vec!["--batch-size", "5000"], "batch-size"),
    ] {
        let mut all = vec!["temporal", "plan", "--synthetic-events", "1000"];
        all.extend(args);
        let output = megagraph(&all);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(word) && !stderr.contains("panicked"), "{stderr}");
    }
    // `auto` is planned for DepBloom's training only
    for (command, flag) in [("train", "--refine"), ("compare", "--window")] {
        let output = megagraph(&["temporal", command, "--synthetic-events", "500", flag, "auto"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(&format!("`{flag}`")),
            "{stderr}"
        );
        assert!(stderr.contains("depbloom") && !stderr.contains("panicked"), "{stderr}");
    }
}

//! End to end: shipped cluster files, planning with an analytic or a loaded profile, explaining
//! the result, and comparing a planned pipeline split with the naive uniform one.

use megagraph_planner::{
    ClusterSpec, ModelShape, ParallelConfig, ProfileTable, SearchOptions, Workload,
    cluster_analytic_profile, evaluate, plan, plan_analytic,
};
use std::path::{Path, PathBuf};

fn config_path(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/clusters")
        .join(file)
}

fn cluster(file: &str) -> ClusterSpec {
    ClusterSpec::from_toml_file(config_path(file)).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn shipped_cluster_files_parse() {
    let local = cluster("cpu-local.toml");
    assert_eq!((local.nodes, local.devices_per_node), (1, 2));
    assert_eq!(local.memory_bytes_per_device * 2, 24 << 30);
    assert!(local.compute.is_some());
    let node = cluster("h200-8x-nvlink.toml");
    assert_eq!(node.devices(), 8);
    assert_eq!(node.intra_node.bandwidth_bytes_per_second, 450e9);
    assert!(node.inter_node.is_none());
    let multi = cluster("h200-4x8-infiniband-ndr.toml");
    assert_eq!(multi.devices(), 32);
    assert_eq!(
        multi.inter_node.map(|l| l.bandwidth_bytes_per_second),
        Some(50e9)
    );
    assert_eq!(node.memory_bytes_per_device, multi.memory_bytes_per_device);
    let one = cluster("h200-1x.toml");
    assert_eq!(one.devices(), 1);
    assert_eq!(
        one.device, node.device,
        "one H200 keys the same measured profiles"
    );
    assert_eq!(one.memory_bytes_per_device, node.memory_bytes_per_device);
}

#[test]
fn plans_and_explains_on_this_machine() {
    let cluster = cluster("cpu-local.toml");
    let shape = ModelShape {
        layers: 2,
        heads: 4,
        ..ModelShape::paper()
    };
    let workload = Workload {
        seq_len: 4_096,
        sequences_per_step: 8,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let report = plan_analytic(&cluster, &shape, &workload, &SearchOptions::default()).unwrap();
    assert_eq!(report.best.layout.world_size(), 2);
    report
        .best
        .layout
        .validate(shape.layers, workload.seq_len, workload.sequences_per_step)
        .unwrap();
    let text = report.explain();
    println!("{text}");
    for section in [
        "Best: pp=",
        "Bottleneck: ",
        "Ranked plans",
        "Memory of the best plan",
        "distance index rows",
        "Rejected: ",
    ] {
        assert!(text.contains(section), "missing {section:?} in\n{text}");
    }
    // pp = 2 needs 2 layers: valid here. Every layout of 2 devices is listed somewhere.
    let layouts = report.candidates.len() + report.rejected.len();
    assert!(layouts >= 3, "{text}");
}

#[test]
fn balanced_split_beats_the_naive_one_when_the_embedding_is_heavy() {
    let cluster = cluster("h200-8x-nvlink.toml").first_devices(2).unwrap();
    let shape = ModelShape::paper();
    let workload = Workload {
        seq_len: 16_384,
        sequences_per_step: 16,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    // A "measured" profile whose embedding stage costs as much as four layers, as when a heavy
    // input encoder runs there, saved and loaded through JSON.
    let mut profile = cluster_analytic_profile(&cluster, &shape, 4).unwrap();
    profile.key.backend = "test-measured".into();
    profile.analytic = false;
    let layer_seconds = |rows: usize| -> (f64, f64) {
        let dense = profile
            .layer_dense
            .iter()
            .find(|s| s.size == rows)
            .map(|s| (s.forward_seconds, s.backward_seconds));
        let attention = profile
            .attention
            .iter()
            .find(|s| s.size == rows)
            .map(|s| (s.forward_seconds, s.backward_seconds));
        match (dense, attention) {
            (Some(d), Some(a)) => (d.0 + a.0, d.1 + a.1),
            _ => (0.0, 0.0),
        }
    };
    let scaled: Vec<(f64, f64)> = profile
        .embedding
        .iter()
        .map(|s| layer_seconds(s.size))
        .collect();
    for (sample, (forward, backward)) in profile.embedding.iter_mut().zip(scaled) {
        if forward > 0.0 {
            sample.forward_seconds = 4.0 * forward;
            sample.backward_seconds = 4.0 * backward;
        }
    }
    // Keep only sizes where the embedding was rescaled (both ladders share them).
    profile.embedding.retain(|s| s.size <= 1 << 18);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    profile.save(&path).unwrap();
    let profile = ProfileTable::load(&path).unwrap();

    let options = SearchOptions::default();
    let report = plan(&cluster, &shape, &workload, &profile, &options).unwrap();
    let pipelined = report
        .candidates
        .iter()
        .find(|p| p.layout.pp == 2 && p.layout.micro_batches == 16)
        .expect("a pp = 2 plan with 16 micro-batches fits");
    assert!(
        pipelined.layout.stage_layers[0] < pipelined.layout.stage_layers[1],
        "stage 0 carries the embedding and must get fewer layers: {:?}",
        pipelined.layout.stage_layers
    );
    let naive = ParallelConfig::uniform(2, 1, 1, 16, 16).unwrap();
    let naive = evaluate(&cluster, &shape, &workload, &profile, &naive, &options).unwrap();
    let balanced = evaluate(
        &cluster,
        &shape,
        &workload,
        &profile,
        &pipelined.layout,
        &options,
    )
    .unwrap();
    assert!((balanced.plan.predicted.step_seconds - pipelined.predicted.step_seconds).abs() < 1e-9);
    assert!(
        balanced.plan.predicted.step_seconds < 0.9 * naive.plan.predicted.step_seconds,
        "balanced {} s vs naive {} s",
        balanced.plan.predicted.step_seconds,
        naive.plan.predicted.step_seconds
    );
    assert!(naive.fits && balanced.fits);
    println!(
        "pp = 2, 16 micro-batches: balanced {:?} {:.3} s vs naive [8, 8] {:.3} s per step",
        pipelined.layout.stage_layers,
        balanced.plan.predicted.step_seconds,
        naive.plan.predicted.step_seconds
    );
}

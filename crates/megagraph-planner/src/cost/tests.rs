//! Unit tests of the cost model.

use super::*;
use crate::cluster::{ComputeHints, LinkSpec};
use crate::latency::FitOptions;
use crate::partition::optimal_partition;
use crate::profile::{ProfileLadder, analytic_profile};

fn model(inter_bandwidth: f64) -> CostModel {
    model_waiting(inter_bandwidth, false)
}

fn model_waiting(inter_bandwidth: f64, backward_waits_for_other_ranks: bool) -> CostModel {
    model_of(ModelShape::paper(), 16_384, inter_bandwidth, backward_waits_for_other_ranks)
}

/// The cost model of `shape` on sequences of `seq_len` nodes, from its analytic profile on
/// H200s (two machines of two).
fn model_of(shape: ModelShape, seq_len: usize, inter_bandwidth: f64, backward_waits_for_other_ranks: bool) -> CostModel {
    let hints = ComputeHints {
        peak_flops: 4.95e14,
        memory_bandwidth_bytes_per_second: 4.8e12,
        efficiency: 0.5,
        kernel_launch_seconds: 5e-6,
    };
    let table = analytic_profile(&hints, "gpu", &shape, 4, &ProfileLadder::default()).unwrap();
    let fitted = FittedProfile::fit(&table, &FitOptions::default()).unwrap();
    let cluster = ClusterSpec {
        name: "t".into(),
        device: "gpu".into(),
        nodes: 2,
        devices_per_node: 2,
        memory_bytes_per_device: 141_000_000_000,
        intra_node: LinkSpec {
            bandwidth_bytes_per_second: 450e9,
            latency_seconds: 2e-6,
        },
        inter_node: Some(LinkSpec {
            bandwidth_bytes_per_second: inter_bandwidth,
            latency_seconds: 1e-5,
        }),
        compute: Some(hints),
        backward_waits_for_other_ranks,
    };
    let workload = Workload {
        seq_len,
        sequences_per_step: 8,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    CostModel::new(shape, workload, cluster, fitted)
}

#[test]
fn context_parallelism_splits_the_attention_work() {
    let model = model(50e9);
    let one = model.candidate(CandidateMesh {
        pp: 1,
        cp: 1,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    });
    let two = model.candidate(CandidateMesh {
        pp: 1,
        cp: 2,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    });
    let (t1, t2) = (one.stage_seconds(0, 16), two.stage_seconds(0, 16));
    // Quadratic attention work halves per rank; nothing much is exposed on NVLink.
    assert!(t2 < 0.6 * t1 && t2 > 0.45 * t1, "{t1} {t2}");
    let step = two.estimate(&[16]);
    assert!((step.pipeline_seconds - 8.0 * t2).abs() < 1e-9 * t2);
    assert!(step.all_reduce_seconds > 0.0);
    assert_eq!(one.all_reduce_seconds(0, 16), 0.0);
}

#[test]
fn slow_links_expose_the_ring_and_name_it() {
    let model = model(1e6);
    // cp = 4 on 2 x 2 devices: the ring crosses nodes.
    let cost = model.candidate(CandidateMesh {
        pp: 1,
        cp: 4,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    });
    let estimate = cost.estimate(&[16]);
    assert!(
        estimate
            .bottleneck
            .contains("exposed ring K/V exchange (inter-node)"),
        "{}",
        estimate.bottleneck
    );
}

#[test]
fn pipeline_stage_times_include_the_sends() {
    let model = model(50e9);
    let cost = model.candidate(CandidateMesh {
        pp: 2,
        cp: 1,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    });
    let estimate = cost.estimate(&[8, 8]);
    assert_eq!(estimate.stage_seconds.len(), 2);
    // Stage 0 has the embedding, stage 1 the head; both send once.
    let layer = cost.stage_seconds(1, 9) - cost.stage_seconds(1, 8);
    assert!(layer > 0.0);
    let expected = 7.0 * estimate.stage_seconds[0].max(estimate.stage_seconds[1])
        + estimate.stage_seconds.iter().sum::<f64>();
    assert!((estimate.pipeline_seconds - expected).abs() < 1e-12);
    assert_eq!(estimate.memory[0].in_flight_micro_batches, 2);
    assert_eq!(estimate.memory[1].in_flight_micro_batches, 1);
}

#[test]
fn stages_of_one_machine_whose_backward_passes_wait_take_longer() {
    let mesh = |pp| CandidateMesh {
        pp,
        cp: 1,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    };
    // pp = 2 on the first node
    let independent = model(50e9).candidate(mesh(2)).estimate(&[8, 8]);
    let waiting = model_waiting(50e9, true)
        .candidate(mesh(2))
        .estimate(&[8, 8]);
    assert_eq!(waiting.stage_passes, independent.stage_passes);
    assert!(
        waiting.pipeline_seconds > independent.pipeline_seconds,
        "{} vs {}",
        waiting.pipeline_seconds,
        independent.pipeline_seconds
    );
    assert_eq!(
        waiting.pipeline_seconds,
        one_forward_one_backward_seconds(
            &waiting.stage_passes,
            8,
            BackwardOverlap::WaitsForOthers,
            &MachineSharing::dedicated()
        )
    );
    // pp = 4 spans both nodes: separate processes, nothing waits
    let independent = model(50e9).candidate(mesh(4)).estimate(&[4, 4, 4, 4]);
    let waiting = model_waiting(50e9, true)
        .candidate(mesh(4))
        .estimate(&[4, 4, 4, 4]);
    assert_eq!(waiting.pipeline_seconds, independent.pipeline_seconds);
}

#[test]
fn stages_sharing_a_machine_run_faster_while_the_others_wait() {
    let dedicated = model_waiting(50e9, true);
    let mut fitted = dedicated.fitted.clone();
    let half = PassRatios {
        forward: 0.5,
        backward: 0.5,
    };
    fitted.solo = Some(SoloRatios {
        copies: 2,
        embedding: half,
        layer_dense: half,
        attention: half,
        head: half,
    });
    let shared = CostModel::new(
        dedicated.shape.clone(),
        dedicated.workload.clone(),
        dedicated.cluster.clone(),
        fitted,
    );
    let mesh = |pp, cp| CandidateMesh {
        pp,
        cp,
        dp: 1,
        micro_batches: 8,
        cp_mode: CpMode::Ring,
    };
    // pp = 2 on the first machine: computing alone halves every part, not the transfers
    // (stage 0 sends its activations forward and nothing backward)
    let cost = shared.candidate(mesh(2, 1));
    let (pass, solo) = (cost.stage_pass(0, 8), cost.stage_solo_pass(0, 8));
    assert!(solo.forward > 0.5 * pass.forward && solo.forward < 0.51 * pass.forward);
    assert!((solo.backward - 0.5 * pass.backward).abs() < 1e-12 * pass.backward);
    let without = dedicated.candidate(mesh(2, 1)).estimate(&[8, 8]);
    let with = cost.estimate(&[8, 8]);
    assert_eq!(with.stage_passes, without.stage_passes);
    assert!(
        with.pipeline_seconds < without.pipeline_seconds,
        "{} vs {}",
        with.pipeline_seconds,
        without.pipeline_seconds
    );
    // one stage's ranks always compute together: nothing changes
    let one = shared.candidate(mesh(1, 2)).estimate(&[16]);
    let alone = dedicated.candidate(mesh(1, 2)).estimate(&[16]);
    assert_eq!(one.pipeline_seconds, alone.pipeline_seconds);
}

#[test]
fn passes_split_every_stage_into_forward_and_backward() {
    let cost = model(50e9).candidate(CandidateMesh {
        pp: 2,
        cp: 2,
        dp: 1,
        micro_batches: 4,
        cp_mode: CpMode::Ring,
    });
    for (stage, layers) in [(0, 3), (1, 5)] {
        let pass = cost.stage_pass(stage, layers);
        assert!(pass.forward > 0.0 && pass.backward > 0.0);
        assert!((pass.total() - cost.stage_seconds(stage, layers)).abs() < 1e-15);
    }
}

#[test]
fn a_heavy_edge_encoding_moves_layers_off_the_first_stage() {
    let mesh = CandidateMesh {
        pp: 2,
        cp: 1,
        dp: 1,
        micro_batches: 4,
        cp_mode: CpMode::Ring,
    };
    let plain = model_of(ModelShape::paper(), 4096, 50e9, false).candidate(mesh);
    let edges = ModelShape {
        edge_feature_dim: 16,
        ..ModelShape::paper()
    };
    let heavy = model_of(edges, 4096, 50e9, false).candidate(mesh);
    // the embedding stage builds the bias of every pair: stage 0 costs more, stage 1 the same
    // layers (its attention reads the bias it receives, which the profile leaves out)
    assert!(heavy.stage_seconds(0, 8) > plain.stage_seconds(0, 8) * 1.2, "{} vs {}", heavy.stage_seconds(0, 8), plain.stage_seconds(0, 8));
    let split = optimal_partition(16, 2, |s, i, j| Some(heavy.stage_seconds(s, j - i)))
        .map(|partition| partition.stage_layers)
        .unwrap_or_default();
    assert!(split.len() == 2 && split[0] < split[1], "{split:?}");
    let balanced = heavy.estimate(&split).step_seconds;
    let even = heavy.estimate(&[8, 8]).step_seconds;
    assert!(balanced < even * 0.95, "{split:?}: {balanced} s vs [8, 8]: {even} s");
}

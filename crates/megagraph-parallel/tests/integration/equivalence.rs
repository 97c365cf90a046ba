//! A parallel run of three optimizer steps equals the single-device run from the same
//! parameters, for every mesh with `pp * cp * dp <= 4`.

use crate::common;

use std::time::Duration;

use common::{
    B, EDGE_DIM, Synthetic, max_parameter_difference, model, model_config, model_of, optimizer, parameters, relative,
    single_device, steps,
};
use megagraph_models::GraphTransformer;
use megagraph_parallel::{ParallelConfig, ParallelTrainer, TrainerOptions};

const LAYERS: usize = 4;
const SEQ_LEN: usize = 16;
const SEQUENCES: usize = 36;
const PER_STEP: usize = 12;
const LR: f64 = 1e-2;

/// Runs `config` and compares with the single-device run.
fn check(config: ParallelConfig) {
    check_model(config, model(LAYERS, 7), || Synthetic::new(SEQUENCES, SEQ_LEN, 11));
}

/// Runs `config` from `initial` on the sequences of `source` and compares with the
/// single-device run; returns the trained model.
fn check_model(
    config: ParallelConfig,
    initial: GraphTransformer<common::Inner>,
    source: impl Fn() -> Synthetic,
) -> GraphTransformer<common::Inner> {
    let steps = steps();
    let reference = source();
    let (expected_losses, expected_model) =
        single_device(initial.clone(), &reference, &steps, LR, &optimizer());

    let options = TrainerOptions::new(SEQ_LEN, PER_STEP)
        .with_optimizer(optimizer())
        .with_timeout(Duration::from_secs(60));
    let source = source().shared();
    let mut trainer = ParallelTrainer::<B>::new(
        config.clone(),
        initial.clone(),
        source,
        options,
        vec![Default::default()],
    )
    .unwrap_or_else(|e| panic!("{config:?}: {e}"));
    for (step, sequences) in steps.iter().enumerate() {
        let output = trainer
            .step(sequences, LR)
            .unwrap_or_else(|e| panic!("{config:?} step {step}: {e}"));
        let expected = expected_losses[step];
        let rel = (output.loss - expected).abs() / expected.abs();
        println!("{config:?} step {step}: loss {} rel {rel:e}", output.loss);
        assert!(
            rel <= 1e-5,
            "{config:?} step {step}: loss {} vs single-device {expected} (rel {rel:e})",
            output.loss
        );
        assert_eq!(output.ranks.len(), config.world_size());
        for report in &output.ranks {
            assert!(
                report.max_in_flight <= config.pp - report.coord.stage,
                "{config:?}: stage {} held {} micro-batches",
                report.coord.stage,
                report.max_in_flight
            );
        }
    }
    let trained = trainer
        .model()
        .unwrap_or_else(|e| panic!("{config:?}: {e}"));
    let (diff, name) = max_parameter_difference(&trained, &expected_model);
    let (moved, _) = max_parameter_difference(&trained, &initial);
    println!("{config:?}: max parameter difference {diff:e} ({name}); moved {moved:e}");
    assert!(
        diff <= 1e-4,
        "{config:?}: parameter {name} differs by {diff:e} (relative)"
    );
    // every replica applied the same update
    let other = trainer
        .replica_model(config.cp - 1, config.dp - 1)
        .unwrap_or_else(|e| panic!("{config:?}: {e}"));
    let (diff, name) = max_parameter_difference(&other, &trained);
    assert!(
        diff <= 1e-6,
        "{config:?}: replicas disagree on {name} by {diff:e}"
    );
    println!("{config:?}: ok");
    trained
}

fn config(
    pp: usize,
    cp: usize,
    dp: usize,
    micro_batches: usize,
    stage_layers: &[usize],
) -> ParallelConfig {
    ParallelConfig {
        pp,
        cp,
        dp,
        micro_batches,
        stage_layers: stage_layers.to_vec(),
        cp_mode: Default::default(),
    }
}

#[test]
fn single_rank_matches() {
    let _turn = crate::turn();
    check(config(1, 1, 1, 1, &[4]));
    // micro-batching alone (gradient accumulation) changes nothing either
    check(config(1, 1, 1, 3, &[4]));
}

#[test]
fn two_ranks_match() {
    let _turn = crate::turn();
    check(config(2, 1, 1, 2, &[2, 2]));
    // a long 1F1B: stage 0 holds two micro-batches in flight, twelve times (with shared
    // parameter nodes, Burn's autodiff clean-up once dropped steps of the other one)
    for _ in 0..3 {
        check(config(2, 1, 1, 12, &[2, 2]));
    }
    check(config(1, 2, 1, 1, &[4]));
    check(config(1, 1, 2, 2, &[4]));
}

#[test]
fn three_ranks_match() {
    let _turn = crate::turn();
    // heterogeneous stages
    check(config(3, 1, 1, 3, &[1, 1, 2]));
    // 16 nodes padded to 18 for three blocks
    check(config(1, 3, 1, 1, &[4]));
    check(config(1, 1, 3, 2, &[4]));
}

#[test]
fn four_ranks_match() {
    let _turn = crate::turn();
    check(config(4, 1, 1, 4, &[1, 1, 1, 1]));
    check(config(2, 2, 1, 2, &[1, 3]));
    check(config(2, 1, 2, 3, &[3, 1]));
    check(config(1, 2, 2, 2, &[4]));
    check(config(1, 4, 1, 1, &[4]));
    check(config(1, 1, 4, 3, &[4]));
}

/// The edge encoding's model and sequences, and its weight in a model.
fn edge_model() -> GraphTransformer<common::Inner> {
    model_of(model_config(LAYERS).with_edge_encoding(Some(EDGE_DIM)), 7)
}

fn edge_source() -> Synthetic {
    Synthetic::new(SEQUENCES, SEQ_LEN, 11).with_edges(5)
}

fn edge_weight(model: &GraphTransformer<common::Inner>) -> Vec<f32> {
    let encoding = model.edge_encoding.as_ref().unwrap_or_else(|| panic!("the model has an edge encoding"));
    parameters(encoding).remove(0).1
}

/// Runs `configs` with the edge encoding and checks that its weight trained as on one device.
fn check_edge_encoding(configs: &[ParallelConfig]) {
    for config in configs {
        let trained = check_model(config.clone(), edge_model(), edge_source);
        // the edge encoder trained (its gradients reached stage 0) as on one device
        let moved = relative(&edge_weight(&trained), &edge_weight(&edge_model()));
        assert!(moved > 1e-3, "{config:?}: the edge encoding moved by {moved:e} only");
    }
}

#[test]
fn the_edge_encoding_on_a_pipeline_matches() {
    let _turn = crate::turn();
    // stage 0 computes the edge encoding's dense bias once per micro-batch; it travels with the
    // activations and its gradient comes back to the encoder on stage 0
    check_edge_encoding(&[config(2, 1, 1, 2, &[2, 2]), config(3, 1, 1, 3, &[1, 2, 1]), config(2, 1, 2, 3, &[1, 3])]);
}

#[test]
fn the_edge_encoding_on_a_ring_matches() {
    let _turn = crate::turn();
    // each ring rank computes its block's rows of the bias; every hop reads the columns of the
    // key block it holds, and the bias's gradient comes back row block by row block (16 nodes
    // padded to 18 for three blocks; with pp = 2 the rows travel to stage 1 and back)
    check_edge_encoding(&[
        config(1, 2, 1, 1, &[4]),
        config(1, 3, 1, 1, &[4]),
        config(1, 4, 1, 1, &[4]),
        config(2, 2, 1, 2, &[1, 3]),
        config(1, 2, 2, 2, &[4]),
    ]);
}

#[test]
fn the_edge_encoding_is_refused_with_ulysses() {
    let _turn = crate::turn();
    // Ulysses' all-to-all would have to send the bias: refused before any rank starts
    let options = TrainerOptions::new(SEQ_LEN, PER_STEP).with_optimizer(optimizer());
    let ulysses = config(1, 2, 1, 1, &[4]).with_cp_mode(megagraph_parallel::CpMode::Ulysses);
    let result = ParallelTrainer::<B>::new(ulysses, edge_model(), edge_source().shared(), options, vec![Default::default()]);
    match result {
        Err(megagraph_parallel::ParallelError::Model { field, .. }) => assert_eq!(field, "edge_encoding"),
        Err(other) => panic!("expected the edge encoding's refusal, got {other}"),
        Ok(_) => panic!("Ulysses with an edge encoding was accepted"),
    }
}

#[test]
fn key_dropout_trains_on_the_ring() {
    let _turn = crate::turn();
    // with key dropout a run is random (each rank draws its own block's key mask, which
    // travels the ring with the keys): check that it trains (finite, changing losses), that
    // every replica applies the same update and that the model keeps its key dropout
    let device = Default::default();
    <common::Inner as burn::tensor::backend::Backend>::seed(&device, 5);
    let initial: megagraph_models::GraphTransformer<common::Inner> =
        common::model_config(2).with_key_dropout(0.3).init(&device);
    let config = config(1, 2, 2, 1, &[2]);
    let options = TrainerOptions::new(SEQ_LEN, PER_STEP).with_timeout(Duration::from_secs(60));
    let source = Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared();
    let mut trainer =
        ParallelTrainer::<B>::new(config, initial, source, options, vec![Default::default()])
            .unwrap_or_else(|e| panic!("{e}"));
    let mut losses = Vec::new();
    for sequences in steps() {
        let output = trainer
            .step(&sequences, LR)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(output.loss.is_finite(), "{output:?}");
        losses.push(output.loss);
    }
    assert!(losses.windows(2).any(|w| w[0] != w[1]), "{losses:?}");
    let a = trainer
        .replica_model(0, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let b = trainer
        .replica_model(1, 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let (diff, name) = max_parameter_difference(&a, &b);
    assert!(diff <= 1e-6, "replicas disagree on {name} by {diff:e}");
    assert_eq!(a.key_dropout, 0.3);
}

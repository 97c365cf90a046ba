//! With `cp_mode = ulysses`, a parallel run of three optimizer steps equals the single-device
//! run from the same parameters (losses to 1e-5 relative), for every mesh with
//! `pp * cp * dp <= 4` whose context degree divides the heads; other degrees are refused.

use crate::common;

use std::time::Duration;

use burn::tensor::backend::Backend;
use common::{
    B, Inner, Synthetic, max_parameter_difference, model_config, optimizer, single_device, steps,
};
use megagraph_models::GraphTransformer;
use megagraph_parallel::{CpMode, ParallelConfig, ParallelError, ParallelTrainer, TrainerOptions};

const LAYERS: usize = 4;
const HEADS: usize = 4;
const SEQ_LEN: usize = 16;
const SEQUENCES: usize = 36;
const PER_STEP: usize = 12;
const LR: f64 = 1e-2;

/// The tests' tiny model with 4 heads (so 2 and 4 context ranks divide them).
fn model(seed: u64) -> GraphTransformer<Inner> {
    let device = Default::default();
    Inner::seed(&device, seed);
    megagraph_models::materialize(model_config(LAYERS).with_num_heads(HEADS).init(&device))
}

fn options() -> TrainerOptions {
    TrainerOptions::new(SEQ_LEN, PER_STEP)
        .with_optimizer(optimizer())
        .with_timeout(Duration::from_secs(60))
}

fn check(pp: usize, cp: usize, dp: usize, micro_batches: usize, stage_layers: &[usize]) {
    let config = ParallelConfig {
        pp,
        cp,
        dp,
        micro_batches,
        stage_layers: stage_layers.to_vec(),
        cp_mode: CpMode::Ulysses,
    };
    let steps = steps();
    let reference = Synthetic::new(SEQUENCES, SEQ_LEN, 11);
    let (expected_losses, expected_model) =
        single_device(model(7), &reference, &steps, LR, &optimizer());
    let source = Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared();
    let mut trainer = ParallelTrainer::<B>::new(
        config.clone(),
        model(7),
        source,
        options(),
        vec![Default::default()],
    )
    .unwrap_or_else(|e| panic!("{config:?}: {e}"));
    for (step, sequences) in steps.iter().enumerate() {
        let output = trainer
            .step(sequences, LR)
            .unwrap_or_else(|e| panic!("{config:?} step {step}: {e}"));
        let expected = expected_losses[step];
        let rel = (output.loss - expected).abs() / expected.abs();
        assert!(
            rel <= 1e-5,
            "{config:?} step {step}: loss {} vs single-device {expected} (rel {rel:e})",
            output.loss
        );
    }
    let trained = trainer
        .model()
        .unwrap_or_else(|e| panic!("{config:?}: {e}"));
    let (diff, name) = max_parameter_difference(&trained, &expected_model);
    // The parameters after three AdamW steps hold to 1e-4 on every mesh. (On cp = dp = 2 about
    // one run in a hundred used to leave the spatial table up to 5e-4 away: the attention op
    // dropped its reference to a Ulysses position's slice of the table before registering its
    // own node, and another rank's end-of-backward clean-up sometimes freed the slice, losing
    // one layer's table gradient on that rank; see cube-kernels/src/autodiff.rs.)
    let tolerance = 1e-4;
    assert!(
        diff <= tolerance,
        "{config:?}: parameter {name} differs by {diff:e} (relative)"
    );
}

#[test]
fn ulysses_meshes_match_one_device() {
    let _turn = crate::turn();
    check(1, 2, 1, 1, &[4]);
    check(1, 4, 1, 1, &[4]);
    check(2, 2, 1, 2, &[1, 3]);
    check(1, 2, 2, 2, &[4]);
    // without context parallelism the mode changes nothing
    check(2, 1, 2, 3, &[3, 1]);
}

#[test]
fn heads_that_do_not_divide_by_cp_are_refused_before_the_mesh_starts() {
    let _turn = crate::turn();
    let config = ParallelConfig {
        pp: 1,
        cp: 3,
        dp: 1,
        micro_batches: 1,
        stage_layers: vec![LAYERS],
        cp_mode: CpMode::Ulysses,
    };
    let source = Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared();
    let error = ParallelTrainer::<B>::new(
        config,
        model(7),
        source,
        options(),
        vec![Default::default()],
    )
    .err();
    assert!(
        matches!(
            error,
            Some(ParallelError::Model {
                field: "num_heads",
                value: HEADS,
                ..
            })
        ),
        "{error:?}"
    );
}

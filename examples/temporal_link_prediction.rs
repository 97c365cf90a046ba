//! Link prediction with a temporal GNN: train TGN (or another preset) on the built-in synthetic
//! user-item stream, or on a dataset in the shared temporal layout, and print test AP.
//!
//! ```text
//! cargo run --release --example temporal_link_prediction -- [--model tgn] [--dataset DIR] [--epochs 3]
//! ```

use burn::backend::{Autodiff, Flex};
use megagraph::graph::temporal::{InteractionConfig, SplitFractions};
use megagraph::models::temporal::TemporalPreset;
use megagraph::temporal::{Quiet, TemporalDataset, TemporalSource, TemporalTrainConfig, TemporalTrainer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = TemporalTrainConfig {
        epochs: 3,
        learning_rate: 1e-3,
        dim: 32,
        batch_size: 200,
        ..TemporalTrainConfig::default()
    };
    let mut source = TemporalSource::Synthetic(InteractionConfig {
        num_events: 10_000,
        ..InteractionConfig::default()
    });
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--model" => {
                config.model = TemporalPreset::from_name(&value).ok_or_else(|| format!("unknown model {value}"))?
            }
            "--dataset" => source = TemporalSource::Dir(value.into()),
            "--epochs" => config.epochs = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let data = TemporalDataset::load(&source, SplitFractions::default())?;
    let report = TemporalTrainer::new(&config, &data).fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)?;
    println!(
        "{} on {}: test AP {:.4}, AUC {:.4}, MRR {:?}; best valid AP {:.4} (epoch {}); {:.0} events/s",
        report.model,
        report.dataset,
        report.test_ap,
        report.test_auc,
        report.test_mrr,
        report.best_valid_ap,
        report.best_epoch,
        report.events_per_second
    );
    Ok(())
}

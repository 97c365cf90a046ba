//! Link prediction with a temporal GNN: train TGN (or another preset) on the built-in synthetic
//! user-item stream, or on a dataset in the shared temporal layout, and print test AP.
//!
//! ```text
//! cargo run --release --example temporal_link_prediction -- [--model tgn] [--dataset DIR] [--epochs 3]
//! ```

use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::Parser;
use megagraph::graph::temporal::{InteractionConfig, SplitFractions};
use megagraph::models::temporal::TemporalPreset;
use megagraph::temporal::{Quiet, TemporalDataset, TemporalSource, TemporalTrainConfig, TemporalTrainer};

/// Train a temporal GNN for link prediction and print its test metrics.
#[derive(Parser)]
struct Args {
    /// The model: tgn, jodie, apan, tgat, dysat or none.
    #[arg(long, default_value = "tgn")]
    model: String,
    /// A dataset in the shared temporal layout (default: 10,000 synthetic events).
    #[arg(long, value_name = "DIR")]
    dataset: Option<PathBuf>,
    /// Training epochs.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let model = TemporalPreset::from_name(&args.model).ok_or_else(|| format!("unknown model {}", args.model))?;
    let config = TemporalTrainConfig {
        model,
        epochs: args.epochs,
        learning_rate: 1e-3,
        dim: 32,
        batch_size: 200,
        ..TemporalTrainConfig::default()
    };
    let source = match args.dataset {
        Some(dir) => TemporalSource::Dir(dir),
        None => TemporalSource::Synthetic(InteractionConfig {
            num_events: 10_000,
            ..InteractionConfig::default()
        }),
    };
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

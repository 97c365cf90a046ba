//! Node classification with megagraph: train a Graph Transformer on a dataset directory (OGB
//! node-property raw layout) or on the built-in synthetic graph, then print its accuracy.
//!
//! ```sh
//! cargo run --release --example node_classification                        # synthetic graph
//! cargo run --release --example node_classification -- --dataset ../shared/datasets/cora
//! cargo run --release --example node_classification -- --epochs 3 --seq-len 64   # quick
//! ```

use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::Parser;
use megagraph::train::{EpochMetrics, NodeClassificationTrainer, TrainConfig, TrainObserver, prepare};

/// Train and evaluate a Graph Transformer for node classification.
#[derive(Parser)]
struct Args {
    /// Dataset directory in the OGB node-property raw layout (default: the synthetic graph).
    #[arg(long, value_name = "DIR")]
    dataset: Option<PathBuf>,
    /// Maximum number of epochs.
    #[arg(long, default_value_t = 100)]
    epochs: usize,
    /// Nodes per sequence.
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// Seed of everything random.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Prints one line per epoch.
struct PrintEpochs;

impl TrainObserver for PrintEpochs {
    fn epoch_finished(&mut self, m: &EpochMetrics, improved: bool) {
        println!(
            "epoch {:>3}  loss {:.4}  train {:.3}  valid {:.3}{}",
            m.epoch,
            m.loss,
            m.train_accuracy,
            m.valid_accuracy,
            if improved { "  *" } else { "" }
        );
    }
}

fn main() -> Result<(), megagraph::train::TrainError> {
    let args = Args::parse();
    let mut config = TrainConfig::default();
    config.data.dataset = args.dataset;
    config.data.seq_len = args.seq_len;
    config.training.epochs = args.epochs;
    config.training.seed = args.seed;

    // Load the graph, group its nodes into sequences, compute their distance indexes.
    let data = prepare(&config)?;
    println!("{}", data.summary());

    // Train on the CPU; the best-validation model comes back with the report.
    let outcome = NodeClassificationTrainer::new(&config, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut PrintEpochs)?;
    let report = &outcome.report;
    println!(
        "best epoch {}: valid accuracy {:.4}, test accuracy {:.4} ({} parameters)",
        report.best_epoch, report.best_valid_accuracy, report.test_accuracy, report.params
    );
    Ok(())
}

#![warn(missing_docs)]
//! Training for megagraph: configuration, node sequences as batches, the single-device
//! node-classification trainer with checkpoints and metrics, and the `megagraph` command line.

mod checkpoint;
pub mod cli;
mod config;
mod data;
mod engine;
mod error;
mod features;
mod metrics;
pub mod parallel;
pub mod plot;
mod prepare;
mod schedule;
mod trainer;

pub use checkpoint::{Checkpointer, TrainState};
pub use config::{
    DataConfig, DistanceKind, MeshConfig, ModelConfig, OptimizerConfig, SequenceKind, SyntheticConfig, TrainConfig,
    TrainingConfig,
};
pub use data::{NodeBatch, SequenceDataset, SequenceOptions, SplitRole};
pub use error::{Result, TrainError};
pub use features::{row_normalized, with_propagated_hops};
pub use metrics::{EpochMetrics, TrainReport, peak_rss_bytes, write_atomically};
pub use prepare::{load_dataset, prepare};
pub use schedule::WarmupCosine;
pub use trainer::{NodeClassificationTrainer, Quiet, SplitAccuracy, TrainObserver, TrainOutcome};

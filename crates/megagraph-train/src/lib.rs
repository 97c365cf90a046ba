#![warn(missing_docs)]
//! Training for megagraph: configuration, node sequences as batches, the single-device
//! node-classification trainer with checkpoints and metrics, and
//! [`learner`]: burn-train integration ([`MegaGraphTrainer`], a learning strategy for Burn's
//! `SupervisedTraining`, with dataset, batcher and model types for node sequences).

mod attention;
mod attention_schedule;
mod beta;
mod checkpoint;
mod class_argmax;
mod config;
mod consistency;
mod correct_smooth;
mod curves;
mod data;
mod edge_paths;
mod edges;
mod engine;
mod error;
mod eval;
mod features;
pub mod files;
pub mod learner;
mod mesh_plan;
mod metrics;
mod observer;
pub mod parallel;
pub mod plot;
mod input_propagation;
mod label_input;
mod prediction_propagation;
mod prefetch;
mod prepare;
mod progress;
mod schedule;
mod step_attention;
mod trainer;
pub mod tune;

/// burn-train, re-exported: `SupervisedTraining`, `Learner`, metrics, checkpointers.
pub use burn_train;
pub use attention::{AttentionConfig, AttentionMode, REFORM_TILE, ReformRule, ReformSetting, full_attention_steps};
pub use beta::{BETA_LEVELS, BetaTuner};
pub use checkpoint::{Checkpointer, TrainState};
pub use config::{
    ClassSplitConfig, DEFAULT_CONSISTENCY_WEIGHT, DEFAULT_LAYER_SCALE, DEFAULT_PROPAGATION_STEPS, DataConfig, DistanceKind, MeshConfig, ModelConfig,
    OptimizerConfig, RatioSplitConfig, RunContext, SCARCE_LABEL_FRACTION, SyntheticConfig, SyntheticKind, TrainConfig,
    TrainingConfig,
};
pub use consistency::ConsistencyRegularization;
pub use correct_smooth::{CorrectAndSmooth, training_labels};
pub use curves::write_training_curves;
pub use data::{NodeBatch, NodeBlock, SequenceDataset, SequenceOptions, SplitRole};
pub use error::{Result, TrainError};
pub use eval::{SeedObserver, SeedRun, SeedsReport, evaluate_seeds, mean_std, seed_config};
pub use mesh_plan::MeshPlan;
pub use features::{FeaturePropagation, propagated_features, row_normalized, with_ppr_propagation, with_propagated_hops};
pub use learner::{
    MegaGraphTrainer, NodeClassifier, NodeLearningComponents, ParallelPlacement, Placement, ScoredBatch, SequenceBatch, SequenceBatcher,
    SplitSequences,
};
pub use metrics::{EnsembleReport, EpochMetrics, SelfTrainingRound, TrainReport};
pub use input_propagation::InputPropagation;
pub use label_input::{LabelInput, ShownLabels};
pub use prediction_propagation::{PredictionPropagation, PropagationEdges};
pub use prefetch::RowLayout;
pub use prepare::{load_dataset, prepare, prepare_with_progress, train_fraction};
pub use progress::PrepareProgress;
pub use schedule::{WarmupCosine, WarmupCosineLr};
pub use step_attention::StepAttention;
pub use observer::{Quiet, TrainObserver, TrainOutcome};
pub use trainer::{NodeClassificationTrainer, SplitAccuracy};

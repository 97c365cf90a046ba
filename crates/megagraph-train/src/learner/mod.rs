//! megagraph in Burn's training framework (burn-train).
//!
//! - [`SplitSequences`]: the sequences of a [`SequenceDataset`](crate::SequenceDataset) that
//!   hold nodes of one split, as a Burn dataset of sequence indices;
//! - [`SequenceBatcher`]: turns those indices into a [`SequenceBatch`], whose
//!   [`tensors`](SequenceBatch::tensors) are the model input (features or ids, degrees, the
//!   `u8` distance index, padding) and the scored nodes;
//! - [`NodeClassifier`]: a Graph Transformer whose `TrainStep` / `InferenceStep` return Burn's
//!   `ClassificationOutput`, so `LossMetric`, `AccuracyMetric` & co. work;
//! - [`MegaGraphTrainer`]: a `SupervisedLearningStrategy` running the steps on one device or on
//!   a `pp x cp x dp` mesh.
//!
//! ```no_run
//! use std::sync::Arc;
//! use burn::backend::{Autodiff, Flex};
//! use burn::data::dataloader::DataLoaderBuilder;
//! use burn::optim::AdamWConfig;
//! use burn::optim::lr_scheduler::constant::ConstantLr;
//! use megagraph_train::burn_train::metric::{AccuracyMetric, LossMetric};
//! use megagraph_train::burn_train::SupervisedTraining;
//! use megagraph_train::{MegaGraphTrainer, NodeClassifier, SequenceBatch, SequenceBatcher, SplitRole,
//!     SplitSequences, TrainConfig, prepare};
//!
//! type B = Autodiff<Flex>;
//! let config = TrainConfig::default();
//! let data = Arc::new(prepare(&config)?);
//! let train = DataLoaderBuilder::<B, usize, SequenceBatch<B>>::new(SequenceBatcher::new(data.clone(), SplitRole::Train))
//!     .batch_size(4)
//!     .shuffle(0)
//!     .build(SplitSequences::new(data.clone(), SplitRole::Train));
//! // validation runs without autodiff, on the inner backend
//! let valid = DataLoaderBuilder::<Flex, usize, SequenceBatch<Flex>>::new(SequenceBatcher::new(data.clone(), SplitRole::Valid))
//!     .batch_size(4)
//!     .build(SplitSequences::new(data.clone(), SplitRole::Valid));
//! let d = &data.dataset;
//! let model_config = config.model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes);
//! let device = Default::default();
//! let trainer = MegaGraphTrainer::<B>::single_device(device).with_optimizer(AdamWConfig::new());
//! // the learner holds the trainer's optimizer (a mesh's ranks would run the same)
//! let learner = trainer.learner(NodeClassifier::<B>::init(&model_config, &device), ConstantLr::new(2e-3));
//! let result = SupervisedTraining::new("artifacts", train, valid)
//!     .metrics((LossMetric::new(), AccuracyMetric::new()))
//!     .num_epochs(10)
//!     .with_training_strategy(trainer.into_strategy())
//!     .launch(learner);
//! let model = result.model; // NodeClassifier<Flex>
//! # Ok::<(), megagraph_train::TrainError>(())
//! ```

mod batch;
mod batcher;
mod dataset;
mod epoch;
mod mesh;
mod model;
mod strategy;

pub use batch::{ScoredBatch, SequenceBatch};
pub use batcher::SequenceBatcher;
pub use dataset::SplitSequences;
pub use model::NodeClassifier;
pub use strategy::{MegaGraphTrainer, NodeLearningComponents, ParallelPlacement, Placement};

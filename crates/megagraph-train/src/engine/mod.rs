//! How the optimizer steps of a run execute: on one device ([`SingleDeviceEngine`]) or on a
//! `pp x cp x dp` mesh of workers ([`MeshEngine`], the one mesh engine: the
//! [`NodeClassificationTrainer`](crate::NodeClassificationTrainer)'s loop and
//! [`MegaGraphTrainer`](crate::MegaGraphTrainer)'s parallel placement both step through it).

mod l2_penalty;
mod mesh;
mod single;

pub(crate) use l2_penalty::L2Penalty;

use std::sync::Arc;
use std::time::Duration;

use burn::optim::AdamWConfig;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::GraphTransformer;
use megagraph_parallel::{NodeConfig, OptimizerRecord};

use crate::data::SequenceDataset;
use crate::consistency::ConsistencyRegularization;
use crate::error::Result;
use crate::input_propagation::InputPropagation;
use crate::label_input::LabelInput;
use crate::prediction_propagation::PredictionPropagation;

pub(crate) use mesh::MeshEngine;
pub(crate) use single::SingleDeviceEngine;
pub(crate) use crate::step_attention::StepAttention;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// Runs optimizer steps and hands out the parameters and the optimizer state.
pub(crate) trait StepEngine<B: AutodiffBackend> {
    /// One optimizer step with learning rate `lr` on the sequences at `indices`; structure
    /// dropout (if configured) draws from `dropout_seed`. `None` when the sequences hold no
    /// training node (nothing is done), else the step's loss.
    fn step(&mut self, indices: &[usize], lr: f64, dropout_seed: u64) -> Result<Option<f64>>;

    /// The current parameters (for evaluation and checkpoints).
    fn model(&mut self) -> Result<GraphTransformer<Inner<B>>>;

    /// The optimizer state of the whole model (for checkpoints).
    fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>>;

    /// What each rank held at most over the steps so far, in rank order (one entry on a single
    /// device).
    fn rank_figures(&self) -> Vec<RankFigures>;

    /// Which attention the following steps run. An engine that runs full attention only (a
    /// mesh: its pipeline and context ring carry no edge lists) refuses sparse attention.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`](crate::TrainError) naming `attention.mode` when the
    /// engine cannot run `attention`.
    fn set_attention(&mut self, attention: StepAttention) -> Result<()> {
        match attention {
            StepAttention::Full => Ok(()),
            StepAttention::Sparse { .. } => Err(crate::TrainError::InvalidConfig {
                field: "attention.mode",
                reason: "sparse and interleaved attention run on one device (pp = cp = dp = 1): a mesh runs full attention".into(),
            }),
        }
    }
}

/// The most one rank held over a run's steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RankFigures {
    /// Bytes of its largest distance index (dense or sparse, as held).
    pub index_bytes: usize,
    /// What a dense `u8` index of the same rows takes.
    pub dense_index_bytes: usize,
    /// Peak bytes of a step from the runtime's memory meter, when it can measure.
    pub peak_bytes: Option<usize>,
}

impl RankFigures {
    /// The larger of each figure.
    pub(crate) fn max(self, other: Self) -> Self {
        Self {
            index_bytes: self.index_bytes.max(other.index_bytes),
            dense_index_bytes: self.dense_index_bytes.max(other.dense_index_bytes),
            peak_bytes: match (self.peak_bytes, other.peak_bytes) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// What every engine starts from besides the parameters.
pub(crate) struct EngineSetup<B: AutodiffBackend> {
    /// The optimizer every engine runs: AdamW with these settings (on a mesh, each rank on
    /// its own parameters).
    pub optimizer: AdamWConfig,
    /// Optimizer state to resume from.
    pub record: Option<OptimizerRecord<B>>,
    /// The training data.
    pub data: Arc<SequenceDataset>,
    /// Structure dropout probability (0 = none).
    pub structure_dropout: f64,
    /// Label smoothing ε of the loss (0 = plain cross-entropy).
    pub label_smoothing: f64,
    /// The coupled L2 penalties of the weights added to the loss (single-device engine only;
    /// the configuration refuses them on a mesh).
    pub l2: L2Penalty,
    /// APPNP's propagation of the logits before the loss (single-device engine only; the
    /// configuration refuses it on a mesh).
    pub propagation: Option<Arc<PredictionPropagation>>,
    /// GRAND's random propagation of the encoded rows before the layers (single-device engine
    /// only; the configuration refuses it on a mesh).
    pub input_propagation: Option<Arc<InputPropagation>>,
    /// GRAND's consistency regularization of every step (single-device engine only; the
    /// configuration refuses it on a mesh).
    pub consistency: Option<ConsistencyRegularization>,
    /// UniMP's label input of every step (single-device engine only; the configuration
    /// refuses it on a mesh).
    pub label_input: Option<LabelInput>,
    /// The device of single-device training and of the returned model.
    pub device: B::Device,
    /// The devices of a mesh's ranks: one per rank, or one shared by every rank.
    pub rank_devices: Vec<B::Device>,
    /// This process's place in a multi-node run (mesh engine only).
    pub nodes: Option<NodeConfig>,
    /// How long a rank waits for a peer before failing (mesh engine only).
    pub timeout: Duration,
}

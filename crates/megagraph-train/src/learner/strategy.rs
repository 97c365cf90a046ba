//! [`MegaGraphTrainer`]: the burn-train learning strategy.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use burn::data::dataloader::Progress;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{AdamW, AdamWConfig};
use burn::tensor::backend::AutodiffBackend;
use burn_train::{
    Learner, LearningComponentsMarker, LearningComponentsTypes, SupervisedLearningStrategy,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingComponents, TrainingModel, TrainingStrategy,
    ValidLoader,
};
use megagraph_models::{GraphAttentionBackend, GraphTransformerConfig};
use megagraph_parallel::{ContextParallelBackend, ParallelConfig, padded_len};

use super::NodeClassifier;
use super::epoch::{EpochScope, drain, train_epoch, valid_epoch};
use super::mesh::MeshEpochs;
use crate::attention::{AttentionConfig, AttentionMode};
use crate::attention_schedule::AttentionSchedule;
use crate::data::SequenceDataset;
use crate::error::{Result, TrainError};

/// Where a [`MegaGraphTrainer`] runs the training steps.
#[derive(Clone, Debug)]
pub enum Placement<B: AutodiffBackend> {
    /// Every step on one device, with the learner's optimizer.
    SingleDevice(B::Device),
    /// Every step on a `pp x cp x dp` mesh of worker threads.
    Parallel(ParallelPlacement<B>),
}

/// A parallel plan and what the mesh needs besides the learner.
#[derive(Clone, Debug)]
pub struct ParallelPlacement<B: AutodiffBackend> {
    /// The plan: degrees, micro-batches and layers per stage.
    pub config: ParallelConfig,
    /// One device per rank (rank order), or one device shared by all ranks.
    pub devices: Vec<B::Device>,
    /// How long a rank waits for a peer before failing. Default: 600 s.
    pub timeout: Duration,
    /// Where the ranks' optimizer state is saved after every epoch (`mesh-optimizer-N.mpk`,
    /// written atomically, the last two kept) and read back when training resumes from
    /// epoch `N + 1`: Burn's checkpoint holds the learner's optimizer, which the mesh does not
    /// use. `None` (the default): the ranks' AdamW moments restart on resume.
    pub optimizer_checkpoints: Option<PathBuf>,
}

/// A burn-train learning strategy that trains a megagraph [`NodeClassifier`] under a parallel
/// plan: on a single device, under a given [`ParallelConfig`], or under the planner's choice
/// ([`from_plan`](Self::from_plan)).
///
/// Plug it into Burn's `SupervisedTraining` with
/// `.with_training_strategy(trainer.into_strategy())`; Burn's metrics (`LossMetric`,
/// `AccuracyMetric`, ...), renderer, checkpointer, early stopping and interrupter keep working.
///
/// - **Single device**: the learner's model, optimizer and learning-rate scheduler, step by step
///   (gradient accumulation included), like Burn's default strategy.
/// - **Parallel**: the learner's model is split into stages and copied to the ranks of a
///   `pp x cp x dp` mesh ([`megagraph_parallel::ParallelTrainer`]); each training batch's
///   sequence indices go to the mesh, which builds each rank's share of the batch itself. The
///   learner's scheduler sets the learning rate of every step; each rank runs the trainer's
///   [`optimizer`](Self::optimizer) on its own parameters. Build the learner with
///   [`learner`](Self::learner) so that it holds that same optimizer: burn-train's `Learner`
///   does not show its optimizer to a strategy, so one built elsewhere with other settings
///   would train differently on one device than on the mesh. After each epoch the parameters come back into the learner, then validation,
///   checkpointing and early stopping run on the main device as usual. Training items report
///   the mesh's loss, with no logits (`output` has 0 rows): register accuracy-like metrics for
///   validation only. Burn's checkpoint holds the model and scheduler; give
///   [`with_optimizer_checkpoints`](Self::with_optimizer_checkpoints) a directory so that the
///   ranks' optimizer state is saved too and a resumed run continues exactly.
///
/// # Panics
///
/// `fit` (called by `SupervisedTraining::launch`) panics when a parallel mesh cannot start, a
/// rank fails, the ranks' optimizer state cannot be saved or read back, or a batch's sparse
/// attention cannot be built (reformation on a dataset whose sequences were not reordered into
/// clusters), with the cause in the message: burn-train strategies return no errors. Call
/// [`check`](Self::check) first: it returns those configurations that do not fit the model or
/// the data as typed errors.
#[derive(Clone, Debug)]
pub struct MegaGraphTrainer<B: AutodiffBackend> {
    placement: Placement<B>,
    optimizer: AdamWConfig,
    /// The attention of the steps ([`with_attention`](Self::with_attention)); `None`: full.
    attention: Option<AttentionSchedule>,
}

/// The burn-train components of a learner built by [`MegaGraphTrainer::learner`]: a
/// [`NodeClassifier`] trained with AdamW under the learning-rate scheduler `LR`.
pub type NodeLearningComponents<B, LR> =
    LearningComponentsMarker<B, LR, NodeClassifier<B>, OptimizerAdaptor<AdamW, NodeClassifier<B>, B>>;

impl<B: AutodiffBackend> MegaGraphTrainer<B> {
    /// Trains on `device`.
    pub fn single_device(device: B::Device) -> Self {
        Self {
            placement: Placement::SingleDevice(device),
            optimizer: AdamWConfig::new(),
            attention: None,
        }
    }

    /// Trains under `config`: rank `r` on `devices[r]`, or every rank on `devices[0]` when one
    /// device is given (threads sharing a CPU, for instance; no device = the default one).
    /// The configuration is checked against the model and the batches when training starts.
    pub fn parallel(config: ParallelConfig, devices: Vec<B::Device>) -> Self {
        let devices = if devices.is_empty() { vec![Default::default()] } else { devices };
        Self {
            placement: Placement::Parallel(ParallelPlacement {
                config,
                devices,
                timeout: Duration::from_secs(600),
                optimizer_checkpoints: None,
            }),
            optimizer: AdamWConfig::new(),
            attention: None,
        }
    }

    /// Trains under the planner's choice ([`megagraph_planner::PlanReport::best`]).
    pub fn from_plan(plan: &megagraph_planner::Plan, devices: Vec<B::Device>) -> Self {
        Self::parallel(plan.to_parallel_config(), devices)
    }

    /// Sets the optimizer: the one [`learner`](Self::learner) builds, and the one every rank of
    /// a parallel placement runs. Default: AdamW's defaults.
    pub fn with_optimizer(mut self, optimizer: AdamWConfig) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// The optimizer of the learner and of the ranks (see [`with_optimizer`](Self::with_optimizer)).
    pub fn optimizer(&self) -> &AdamWConfig {
        &self.optimizer
    }

    /// A burn-train `Learner` of `model` with this trainer's [`optimizer`](Self::optimizer) and
    /// `lr_scheduler`: on one device the learner's optimizer steps, on a mesh every rank runs
    /// the same settings, so both placements train alike.
    pub fn learner<LR: LrScheduler + 'static>(
        &self,
        model: NodeClassifier<B>,
        lr_scheduler: LR,
    ) -> Learner<NodeLearningComponents<B, LR>>
    where
        B::InnerBackend: GraphAttentionBackend,
        B: GraphAttentionBackend,
    {
        Learner::new(model, self.optimizer.init(), lr_scheduler)
    }

    /// Saves the optimizer state of a parallel placement's ranks in `dir` after every epoch
    /// and reads it back on resume (see [`ParallelPlacement::optimizer_checkpoints`]); ignored
    /// on a single device, where Burn's checkpoint holds the learner's optimizer.
    pub fn with_optimizer_checkpoints(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Placement::Parallel(parallel) = &mut self.placement {
            parallel.optimizer_checkpoints = Some(dir.into());
        }
        self
    }

    /// Runs the steps with the attention of `attention` (the `[attention]` section), as the
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) does on one device:
    /// sparse attention on every step, or full attention on `switch_freq` evenly spaced steps
    /// of each epoch and sparse on the others, reformed into tiles placed by `seed` (the run's
    /// `training.seed`) with `block_reform`; validation runs the sparse attention of a sparse or
    /// interleaved run. Sparse steps build no distance rows. Reformation needs the dataset's
    /// sequences reordered into clusters (`attention.reorder` in [`prepare`](crate::prepare)).
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming the field: an invalid section
    /// ([`AttentionConfig::validate`]); sparse or interleaved attention on a parallel
    /// placement (`attention.mode`: a mesh runs full attention, as on the command line); or
    /// `reform_threshold = "tuned"` (`attention.reform_threshold`: `β`'s tuner lives in the
    /// command line's loop, whose checkpoints keep its state; use `"all"` or a fixed `β`).
    pub fn with_attention(mut self, attention: AttentionConfig, seed: u64) -> Result<Self> {
        attention.validate()?;
        if attention.mode != AttentionMode::Full && matches!(self.placement, Placement::Parallel(_)) {
            return Err(TrainError::InvalidConfig {
                field: "attention.mode",
                reason: format!(
                    "{:?} attention runs on one device (MegaGraphTrainer::single_device): a parallel placement runs full attention",
                    attention.mode
                ),
            });
        }
        if attention.tunes_beta() {
            return Err(TrainError::InvalidConfig {
                field: "attention.reform_threshold",
                reason: "\"tuned\" β runs in NodeClassificationTrainer (its checkpoints keep the tuner's state); use \"all\" or a fixed β here".into(),
            });
        }
        self.attention = Some(AttentionSchedule::new(attention, seed));
        Ok(self)
    }

    /// Sets how long a rank of a parallel placement waits for a peer.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        if let Placement::Parallel(parallel) = &mut self.placement {
            parallel.timeout = timeout;
        }
        self
    }

    /// Checks this strategy against a model, the dataset its loaders read and the batch size
    /// (sequences per step) before training: what the attention
    /// ([`with_attention`](Self::with_attention)) needs of the data, as the command line's loop
    /// checks it, and whether a parallel placement fits (a single device always does). Training under a configuration that does
    /// not pass panics in `fit` (burn-train strategies return no errors).
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming `attention.block_reform` when the attention reforms
    /// the edges into tiles but `data`'s sequences were not reordered into clusters
    /// ([`SequenceDataset::check_attention`]); [`TrainError::Parallel`] with the mesh's first
    /// mismatch, e.g. a `dp` that does not divide the batch size.
    pub fn check(&self, model: &GraphTransformerConfig, data: &SequenceDataset, batch_size: usize) -> Result<()> {
        if let Some(attention) = &self.attention {
            data.check_attention(attention.config())?;
        }
        match &self.placement {
            Placement::SingleDevice(_) => Ok(()),
            Placement::Parallel(parallel) => {
                let config = &parallel.config;
                config
                    .validate(model.num_layers, padded_len(data.seq_len, config.cp), batch_size)
                    .map_err(|error| TrainError::Parallel(error.into()))
            }
        }
    }

    /// Where the steps run.
    pub fn placement(&self) -> &Placement<B> {
        &self.placement
    }

    /// The main device: where the learner's model lives, validation runs and the parameters
    /// come back to.
    pub fn main_device(&self) -> &B::Device {
        match &self.placement {
            Placement::SingleDevice(device) => device,
            Placement::Parallel(parallel) => &parallel.devices[0],
        }
    }

    /// This strategy as Burn's `TrainingStrategy`, for
    /// `SupervisedTraining::with_training_strategy`.
    pub fn into_strategy<LC>(self) -> TrainingStrategy<LC>
    where
        LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>, InferenceModel = NodeClassifier<B::InnerBackend>>,
        B: ContextParallelBackend,
        B::InnerBackend: GraphAttentionBackend,
    {
        TrainingStrategy::Custom(Arc::new(self))
    }
}

impl<B, LC> SupervisedLearningStrategy<LC> for MegaGraphTrainer<B>
where
    B: ContextParallelBackend,
    B::InnerBackend: GraphAttentionBackend,
    LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>, InferenceModel = NodeClassifier<B::InnerBackend>>,
{
    fn fit(
        &self,
        components: TrainingComponents<LC>,
        mut learner: Learner<LC>,
        train: TrainLoader<LC>,
        valid: ValidLoader<LC>,
        starting_epoch: usize,
    ) -> (TrainingModel<LC>, SupervisedTrainingEventProcessor<LC>) {
        let device = self.main_device().clone();
        let train = train.to_device(&device);
        let valid = valid.to_device(&device);
        learner.fork(&device);
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let interrupter = components.interrupter;
        // sparse steps join a graph token where the learner's model has one
        let graph_token = learner.model().model.graph_token.is_some();
        let attention = self.attention.clone().map(|schedule| schedule.with_graph_token(graph_token));
        let mut mesh = match &self.placement {
            Placement::SingleDevice(_) => None,
            Placement::Parallel(parallel) => Some(MeshEpochs::<B>::new(parallel.clone(), self.optimizer.clone(), starting_epoch)),
        };

        for epoch in starting_epoch..=components.num_epochs {
            let epochs = Progress {
                items_processed: epoch,
                items_total: components.num_epochs,
            };
            match &mut mesh {
                None => {
                    let scope = EpochScope {
                        epochs: &epochs,
                        processor: &mut processor,
                        interrupter: &interrupter,
                        attention: attention.as_ref(),
                    };
                    train_epoch(&mut learner, &train, components.grad_accumulation, scope)
                }
                Some(mesh) => mesh.train_epoch(&mut learner, &train, &epochs, &mut processor, &interrupter),
            }
            if interrupter.should_stop() {
                let reason = interrupter.get_message().unwrap_or_else(|| "no reason given".into());
                log::info!("training interrupted: {reason}");
                break;
            }
            let scope = EpochScope {
                epochs: &epochs,
                processor: &mut processor,
                interrupter: &interrupter,
                attention: attention.as_ref(),
            };
            valid_epoch(&learner, &valid, scope);
            drain::<LC>(&mut processor);
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, epoch, &components.event_store);
            }
            if let Some(mesh) = &mut mesh {
                mesh.save_optimizer(epoch);
            }
            if let Some(early_stopping) = &mut early_stopping
                && early_stopping.should_stop(epoch, &components.event_store)
            {
                break;
            }
        }
        (learner.model(), processor)
    }
}

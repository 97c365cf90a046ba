//! The resume step of the training loop: a fresh [`TrainState`], or the latest checkpoint's
//! parameters, best model, optimizer state and progress.

use burn::tensor::backend::AutodiffBackend;
use megagraph_models::GraphTransformer;
use megagraph_parallel::{ContextParallelBackend, OptimizerRecord};

use super::NodeClassificationTrainer;
use crate::checkpoint::{Checkpointer, TrainState};
use crate::error::{Result, TrainError};

/// Where a run starts: after the checkpoint it resumed from, or from scratch.
pub(super) struct Start<B: ContextParallelBackend> {
    /// The parameters to train on.
    pub model: GraphTransformer<<B as AutodiffBackend>::InnerBackend>,
    /// The best-validation parameters so far.
    pub best: GraphTransformer<<B as AutodiffBackend>::InnerBackend>,
    /// The optimizer state to continue with (none from scratch).
    pub record: Option<OptimizerRecord<B>>,
    /// The progress so far.
    pub state: TrainState,
}

impl NodeClassificationTrainer<'_> {
    /// Starts from `initial` parameters, or, with `training.resume`, from the latest checkpoint
    /// of `checkpointer` (refused when it was written with another configuration or dataset;
    /// a directory without checkpoints starts from scratch with a warning).
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] for `training.resume` without a checkpoint directory, a
    /// checkpoint of another configuration, or one that cannot be read.
    pub(super) fn resume<B: ContextParallelBackend>(
        &self,
        initial: GraphTransformer<B::InnerBackend>,
        checkpointer: Option<&Checkpointer>,
        device: &B::Device,
    ) -> Result<Start<B>> {
        let fingerprint = self.fingerprint();
        let fresh = Start {
            model: initial.clone(),
            best: initial,
            record: None,
            state: TrainState::fresh(fingerprint.clone()),
        };
        if !self.config.training.resume {
            return Ok(fresh);
        }
        let checkpointer = checkpointer.ok_or(TrainError::InvalidConfig {
            field: "training.resume",
            reason: "needs training.checkpoint_dir".into(),
        })?;
        let Some(saved) = checkpointer.latest_state()? else {
            log::warn!("no checkpoint in {}: starting from scratch", checkpointer.dir().display());
            return Ok(fresh);
        };
        if saved.config_fingerprint != fingerprint {
            return Err(TrainError::Checkpoint {
                path: checkpointer.dir().to_path_buf(),
                message: "was written with a different configuration or dataset; \
                          resume with the same options or use another --checkpoint-dir"
                    .into(),
            });
        }
        let (model, best, record) = checkpointer.load::<B, _, _>(fresh.model, fresh.best, device)?;
        log::info!("resuming after epoch {} from {}", saved.epoch, checkpointer.dir().display());
        Ok(Start {
            model,
            best,
            record: Some(record),
            state: saved,
        })
    }
}

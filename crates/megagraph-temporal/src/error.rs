use std::path::PathBuf;

use megagraph_graph::temporal::TemporalError;
use megagraph_models::temporal::TemporalStateError;
use megagraph_train::TrainError;

/// Everything that can go wrong while training a temporal model.
#[derive(Debug, thiserror::Error)]
pub enum TemporalTrainError {
    /// The event stream could not be loaded or sampled.
    #[error(transparent)]
    Data(#[from] TemporalError),
    /// Node memory or mailbox state is inconsistent (ids out of range, shapes).
    #[error(transparent)]
    State(#[from] TemporalStateError),
    /// A configuration value is out of range or inconsistent with the data.
    #[error("invalid configuration: `{field}` {reason}")]
    InvalidConfig {
        /// The offending field, as spelled on the command line.
        field: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// A checkpoint could not be written or read, or belongs to another run.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Writing outputs or checkpoints failed.
    #[error(transparent)]
    Output(#[from] TrainError),
    /// Training was interrupted by its observer after `epoch` epochs.
    #[error("training interrupted after epoch {epoch}")]
    Interrupted {
        /// Epochs completed (and checkpointed, when checkpoints are on).
        epoch: usize,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = TemporalTrainError> = std::result::Result<T, E>;

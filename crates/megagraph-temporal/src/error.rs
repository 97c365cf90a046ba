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
    /// A worker of a multi-worker run failed, panicked, or was stopped by another's failure.
    #[error("worker {worker}: {message}")]
    Worker {
        /// The worker.
        worker: usize,
        /// What happened.
        message: String,
    },
    /// The workers' gradient all-reduce failed.
    #[error(transparent)]
    Parallel(#[from] megagraph_parallel::ParallelError),
    /// A worker's model replica differs from worker 0's after an epoch: the replicas must stay
    /// equal, since every worker applies the same averaged gradients.
    #[error("worker {worker}'s parameters differ from worker 0's after epoch {epoch} (by up to {difference})")]
    ReplicasDiverged {
        /// The worker.
        worker: usize,
        /// The epoch.
        epoch: usize,
        /// The largest absolute difference of a parameter.
        difference: f64,
    },
    /// Training was interrupted by its observer after `epoch` epochs.
    #[error("training interrupted after epoch {epoch}")]
    Interrupted {
        /// Epochs completed (and checkpointed, when checkpoints are on).
        epoch: usize,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = TemporalTrainError> = std::result::Result<T, E>;

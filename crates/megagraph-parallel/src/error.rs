//! [`ParallelError`]: why a parallel run refused to start or stopped.

use megagraph_kernels::AttentionError;

use crate::{NodeError, ParallelConfigError};

/// Why a [`ParallelTrainer`](crate::ParallelTrainer) (or a ring attention call) failed.
///
/// Errors raised on a worker name its rank; [`ParallelError::rank`] reads it back. When one
/// worker fails, the whole mesh stops and the trainer returns the first failure that was not a
/// consequence of another one (a worker that only saw the mesh stop reports
/// [`ParallelError::Aborted`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParallelError {
    /// The configuration does not fit the model or the workload.
    #[error("invalid parallel configuration: {0}")]
    Config(#[from] ParallelConfigError),
    /// The model cannot run under this configuration.
    #[error("model does not fit the parallel run: {field} = {value}: {reason}")]
    Model {
        /// The offending model field or input (`layers`, `num_heads`, ...).
        field: &'static str,
        /// Its value.
        value: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The number of devices given is neither 1 nor the world size.
    #[error("{given} devices given for a mesh of {world} ranks: give 1 (shared) or one per rank")]
    DeviceCount {
        /// Devices given.
        given: usize,
        /// `pp * cp * dp`.
        world: usize,
    },
    /// A step got fewer sequences than there are micro-batches over all replicas.
    #[error(
        "step with {sequences} sequences: every one of dp x micro_batches = {needed} micro-batches needs a sequence"
    )]
    TooFewSequences {
        /// Sequences given.
        sequences: usize,
        /// `dp * micro_batches`.
        needed: usize,
    },
    /// A sequence index is out of the source's range, or a batch has the wrong shape.
    #[error("rank {rank}: batch source: {message}")]
    Source {
        /// The rank that asked for the batch.
        rank: usize,
        /// What the source reported.
        message: String,
    },
    /// The attention op refused its inputs.
    #[error("rank {rank}: attention: {source}")]
    Attention {
        /// The rank that called the op.
        rank: usize,
        /// The op's error.
        source: AttentionError,
    },
    /// A feature the parallel path does not support.
    #[error("rank {rank}: unsupported: {what}")]
    Unsupported {
        /// The rank that met it.
        rank: usize,
        /// What is unsupported.
        what: &'static str,
    },
    /// A worker panicked.
    #[error("rank {rank} panicked: {message}")]
    WorkerPanicked {
        /// The rank whose thread panicked.
        rank: usize,
        /// The panic message.
        message: String,
    },
    /// A worker waited too long for a message from a peer.
    #[error("rank {rank} waited {seconds:.1} s for {waiting_for} without an answer")]
    PeerTimeout {
        /// The waiting rank.
        rank: usize,
        /// What it waited for (`activation from stage 0`, `ring block`, ...).
        waiting_for: String,
        /// How long it waited.
        seconds: f64,
    },
    /// A peer's channel closed: that worker is gone.
    #[error("rank {rank}: the peer sending {waiting_for} has stopped")]
    PeerGone {
        /// The rank that noticed.
        rank: usize,
        /// What it waited for.
        waiting_for: String,
    },
    /// A message arrived out of order: the ranks of a group disagree on the schedule.
    #[error("rank {rank}: expected {expected}, got {got}")]
    OutOfOrder {
        /// The receiving rank.
        rank: usize,
        /// The message it expected.
        expected: String,
        /// The message it got.
        got: String,
    },
    /// A burn-collective operation failed.
    #[error("rank {rank}: collective {operation} failed: {message}")]
    Collective {
        /// The calling rank.
        rank: usize,
        /// `register`, `all_reduce`, ...
        operation: &'static str,
        /// The collective's error.
        message: String,
    },
    /// Another mesh of this process holds the collective (burn-collective runs one group per
    /// backend and process) and did not release it in time.
    #[error(
        "another parallel trainer of this process uses the gradient all-reduce; waited {seconds:.1} s for it to be dropped"
    )]
    CollectiveBusy {
        /// How long the new trainer waited.
        seconds: f64,
    },
    /// The multi-node setup is invalid (a bad address, a taken port, ...).
    #[error("multi-node setup: {0}")]
    Nodes(#[from] NodeError),
    /// A multi-node collective operation broke off: another node ended or became unreachable.
    #[error("node {node}, rank {rank}: the multi-node {operation} broke off: {message}")]
    NodeLost {
        /// This process's node rank.
        node: usize,
        /// The local rank that noticed.
        rank: usize,
        /// `register`, `all_reduce` or `finish`.
        operation: &'static str,
        /// What happened.
        message: String,
    },
    /// This worker stopped because another one failed.
    #[error("rank {rank} stopped because another rank failed")]
    Aborted {
        /// The rank that stopped.
        rank: usize,
    },
    /// The mesh has stopped after an earlier failure; create a new trainer.
    #[error("the mesh stopped after an earlier failure: {0}")]
    Stopped(Box<ParallelError>),
}

impl ParallelError {
    /// The rank the error happened on, if it happened on a worker.
    pub fn rank(&self) -> Option<usize> {
        match self {
            ParallelError::Source { rank, .. }
            | ParallelError::Attention { rank, .. }
            | ParallelError::Unsupported { rank, .. }
            | ParallelError::WorkerPanicked { rank, .. }
            | ParallelError::PeerTimeout { rank, .. }
            | ParallelError::PeerGone { rank, .. }
            | ParallelError::OutOfOrder { rank, .. }
            | ParallelError::Collective { rank, .. }
            | ParallelError::NodeLost { rank, .. }
            | ParallelError::Aborted { rank } => Some(*rank),
            ParallelError::Stopped(inner) => inner.rank(),
            _ => None,
        }
    }

    /// Whether this error only reports that a worker stopped because of another failure (a lost
    /// peer or node, an abort): the root cause is elsewhere.
    pub fn is_consequence(&self) -> bool {
        matches!(
            self,
            ParallelError::Aborted { .. }
                | ParallelError::PeerGone { .. }
                | ParallelError::NodeLost { .. }
        ) || matches!(
            self,
            ParallelError::Collective { message, .. } if message.contains("LocalServerMissing")
                || message.contains("RegisterNotFirstOperation")
        )
    }
}

use std::path::PathBuf;

use megagraph_graph::{GraphError, LoadError};

/// Everything that can go wrong while configuring or running training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A configuration file is not valid TOML for [`TrainConfig`](crate::TrainConfig).
    #[error("invalid config file {path}: {message}")]
    ConfigParse {
        /// The file.
        path: PathBuf,
        /// What is wrong and where (line and column).
        message: String,
    },
    /// A configuration value is out of range or inconsistent with the data.
    #[error("invalid configuration: `{field}` {reason}")]
    InvalidConfig {
        /// The offending field, as spelled in the config file.
        field: &'static str,
        /// Why it is rejected and what to change.
        reason: String,
    },
    /// The dataset could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A graph operation failed (synthetic generation, distance indexes).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A checkpoint could not be written or read.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Training was interrupted by its observer after `epoch` epochs (checkpoint written, if any).
    #[error("training interrupted after epoch {epoch}")]
    Interrupted {
        /// Epochs completed.
        epoch: usize,
    },
    /// Planning the layout of `[mesh] plan = "auto"` failed (bad cluster file, nothing fits, ...).
    #[error(transparent)]
    Plan(#[from] megagraph_planner::PlanError),
    /// A plan file (`--plan FILE`) could not be read.
    #[error("plan file {path}: {message}")]
    PlanFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The parallel mesh failed (a worker's error names its rank).
    #[error(transparent)]
    Parallel(#[from] megagraph_parallel::ParallelError),
    /// An attention core refused its inputs (sparse attention's edges that do not fit the
    /// batch).
    #[error(transparent)]
    Attention(#[from] megagraph_kernels::AttentionError),
    /// An output file (metrics, plots) could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

//! [`TuneError`]: what can go wrong in a hyperparameter search.

use std::path::PathBuf;

use crate::error::TrainError;

/// Everything that can go wrong while reading a search space, running its trials or writing
/// their results.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The search-space file could not be read.
    #[error("cannot read search space {path}: {source}")]
    SpaceRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The search-space file is not valid TOML for a search space.
    #[error("invalid search space {path}: {message}")]
    SpaceParse {
        /// The file.
        path: PathBuf,
        /// What is wrong and where (line and column).
        message: String,
    },
    /// A value of the search space is out of range or inconsistent.
    #[error("search space {path}: `{key}` {reason}")]
    Space {
        /// The file.
        path: PathBuf,
        /// The offending key (`search.trials`, `params."optimizer.lr"`, ...).
        key: String,
        /// Why it is rejected and what to change.
        reason: String,
    },
    /// A trial's parameter value cannot be set on the training configuration (an unknown
    /// field, a wrong type, an out-of-range value).
    #[error("trial parameter `{key}` = {value}: {reason}")]
    Param {
        /// The dotted config key (`optimizer.lr`).
        key: String,
        /// The value, as TOML.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The trials journal could not be read or written, or belongs to another search.
    #[error("trials journal {path}: {message}")]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Preparing the data or training a trial failed, or an output could not be written.
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// Shorthand for results of the search.
pub type TuneResult<T> = std::result::Result<T, TuneError>;

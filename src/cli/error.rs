//! [`CliError`]: what the `megagraph` command line reports; the libraries' errors and its own.

use std::path::PathBuf;

use megagraph_parallel::NodeError;
use megagraph_calibrate::{CalibrateError, MeasureError, ValidateError};
use megagraph_planner::PlanError;
use megagraph_train::TrainError;

/// Everything that can go wrong in a `megagraph` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value is out of range, or this build cannot honour it.
    #[error("invalid `--{flag}`: {reason}")]
    InvalidFlag {
        /// The flag, without its dashes (`devices`, `validate-seconds`, ...).
        flag: &'static str,
        /// Why it is rejected and what to change.
        reason: String,
    },
    /// Configuring, preparing or running training failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// A hyperparameter search failed (its space, journal, a trial's training).
    #[error(transparent)]
    Tune(#[from] megagraph_train::tune::TuneError),
    /// Loading, training or testing a temporal model failed.
    #[error(transparent)]
    Temporal(#[from] megagraph_temporal::TemporalTrainError),
    /// A temporal profile could not be read, written or planned from.
    #[error(transparent)]
    TemporalPlan(#[from] megagraph_planner::temporal::TemporalPlanError),
    /// Planning failed (bad cluster file, nothing fits, ...).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Measuring a profile failed.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// Running plans to validate them failed.
    #[error(transparent)]
    Validate(#[from] ValidateError),
    /// Validating plans with the profile measured in turn failed.
    #[error(transparent)]
    Calibrate(#[from] CalibrateError),
    /// The multi-node flags are invalid or the orchestrator cannot start.
    #[error(transparent)]
    Nodes(#[from] NodeError),
    /// An output file (a plan or profile as JSON) could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The I/O or serialization error.
        source: std::io::Error,
    },
}

impl CliError {
    /// An [`InvalidFlag`](Self::InvalidFlag) error.
    pub fn flag(flag: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidFlag {
            flag,
            reason: reason.into(),
        }
    }
}

/// Shorthand for results of the command line.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

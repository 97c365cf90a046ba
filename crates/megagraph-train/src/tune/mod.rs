//! `megagraph tune`: a hyperparameter search. A [`SearchSpace`] (TOML: grid or seeded random
//! draws within a trial budget) plans trials; [`run_search`] trains each on the base config with
//! its parameters through [`evaluate_seeds`](crate::evaluate_seeds) (the path of
//! `megagraph train`), scores it by mean best validation accuracy, journals it atomically, and
//! writes the best config (`best.toml`, which `train --config` reads), a JSON summary and an SVG
//! chart. A search started again with the same arguments skips the journaled trials.

mod apply;
mod error;
mod journal;
mod runner;
mod space;

pub use apply::trial_config;
pub use error::{TuneError, TuneResult};
pub use journal::{Journal, TrialResult};
pub use runner::{TuneObserver, TuneOutputs, TuneReport, run_search, trials_chart};
pub use space::{Param, SearchSpace, Strategy, TrialParams};

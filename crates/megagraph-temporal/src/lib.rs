#![warn(missing_docs)]
//! Temporal GNN training for megagraph: memory-based link prediction (TGN, JODIE, APAN, TGAT,
//! DySAT) on event streams, with TGL's semantics (github amazon-research/tgl).
//!
//! - [`TemporalDataset`]: an event stream from the shared layout, a JODIE or TGL file, or the
//!   seeded synthetic default, with its chronological split.
//! - [`TemporalTrainer`]: batches of chronological events, deferred memory updates, early
//!   stopping on validation AP, atomic checkpoints with the node memory, exact resume.
//! - [`TemporalScheme`]: several workers train one run (DistTGL's mini-batch, epoch and memory
//!   parallelism, DepBloom), with `workers` and `scheme` in [`TemporalTrainConfig`].
//! - [`measure_temporal_profile`]: the measured profile from which `megagraph_planner::temporal`
//!   suggests DepBloom's window and refinement count.
//! - [`metrics`]: AP (over a split and per batch), ROC AUC and MRR.

mod batches;
mod config;
mod curves;
mod dataset;
mod error;
mod evaluate;
mod forward;
pub mod metrics;
mod observer;
mod plan_profile;
mod prepare;
mod report;
mod scheme;
mod setup;
mod state;
mod step;
mod tensors;
mod trainer;
mod workers;

/// Unit tests that draw from the backend's random generator take turns: it is one per process,
/// and another test's draws between a seed and an initialization would change the parameters.
#[cfg(test)]
pub(crate) fn seeded_turn() -> std::sync::MutexGuard<'static, ()> {
    static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SEEDED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use config::{DEFAULT_WINDOW_STEPS, TemporalTrainConfig};
pub use curves::write_temporal_curves;
pub use dataset::{TemporalDataset, TemporalSource};
pub use error::{Result, TemporalTrainError};
pub use observer::{Quiet, TemporalObserver};
pub use plan_profile::{TemporalProfileOptions, measure_temporal_profile};
pub use prepare::{Neighbourhood, PreparedBatch, SampledSnapshots};
pub use report::{TemporalEpoch, TemporalReport};
pub use state::{NodeState, NodeStateData};
pub use tensors::BatchTensors;
pub use trainer::TemporalTrainer;
pub use scheme::TemporalScheme;

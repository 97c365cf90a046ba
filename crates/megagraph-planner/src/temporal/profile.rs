//! [`TemporalProfile`]: what temporal training measured on one dataset and backend, for the
//! DepBloom planner; stored as JSON ([`TemporalProfile::load`], [`TemporalProfile::save`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::TemporalPlanError;
use crate::profile::{read_json, write_json};

/// One intra-batch memory refinement count, measured on a training batch of
/// [`TemporalSetting::batch_size`] events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefineSample {
    /// Chunks per batch (IMR(c)); 1 is the plain batch.
    pub refine: usize,
    /// Seconds of one training step (forward, backward, optimizer step, memory write) of one
    /// batch, warm-up excluded.
    pub seconds_per_batch: f64,
    /// Share of training events with an endpoint that an earlier event of the same chunk
    /// touched (their memory is stale when they are read): the staleness proxy.
    pub dependency_ratio: f64,
}

/// One candidate window of DepBloom's temporally bounded partitioning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowSample {
    /// Events per window.
    pub window: usize,
    /// Cross-shard events / events with topology-aware shards over the workers.
    pub cross_shard_ratio: f64,
    /// Largest shard / mean shard size, averaged over the windows (1 = balanced).
    pub imbalance: f64,
    /// Distinct nodes a window touches, averaged over the windows: the rows a window-boundary
    /// exchange synchronizes.
    pub nodes_per_window: f64,
}

/// What a [`TemporalProfile`] was measured for, and what its plan answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalSetting {
    /// The dataset's name.
    pub dataset: String,
    /// The model's name.
    pub model: String,
    /// The backend the steps were timed on.
    pub backend: String,
    /// Workers the run will have.
    pub workers: usize,
    /// Events per batch of one worker.
    pub batch_size: usize,
    /// Training events per epoch.
    pub train_events: usize,
}

/// What the DepBloom planner reads: step times per refinement count, the window-boundary
/// synchronization cost, and per candidate window the sharding statistics of the stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalProfile {
    /// What was measured: dataset, model, backend, workers, batch size.
    #[serde(flatten)]
    pub setting: TemporalSetting,
    /// The small batch whose staleness refinement should reach (TGL's 600).
    pub reference_batch: usize,
    /// [`RefineSample::dependency_ratio`] of plain batches of `reference_batch` events.
    pub reference_dependency_ratio: f64,
    /// Seconds of one training step of a plain batch of `reference_batch` events.
    pub reference_seconds_per_batch: f64,
    /// The refinement counts measured, in increasing order, starting with 1.
    pub refine: Vec<RefineSample>,
    /// Seconds to synchronize one node's state (memory and mails) at a window boundary:
    /// reading its row out of one worker's state and writing it into another's.
    pub sync_seconds_per_node: f64,
    /// The candidate windows, in increasing order.
    pub windows: Vec<WindowSample>,
}

impl TemporalProfile {
    /// Reads and validates a profile from a JSON file.
    ///
    /// # Errors
    ///
    /// An unreadable or malformed file, or a profile [`validate`](Self::validate) rejects.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TemporalPlanError> {
        let profile: Self = read_json(path.as_ref())?;
        profile.validate()?;
        Ok(profile)
    }

    /// Writes this profile as pretty JSON, atomically, creating parent directories.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TemporalPlanError> {
        Ok(write_json(path.as_ref(), self)?)
    }

    /// Checks that a plan can be made from this profile: at least one worker, a batch within
    /// the training events, refinement counts starting at 1 within the batch, windows of at
    /// least one event per worker, finite non-negative times and ratios in `[0, 1]`.
    ///
    /// # Errors
    ///
    /// [`TemporalPlanError::Invalid`] naming the first offending field.
    pub fn validate(&self) -> Result<(), TemporalPlanError> {
        if self.setting.workers == 0 {
            return Err(TemporalPlanError::invalid(
                "workers",
                self.setting.workers,
                "must be at least 1",
            ));
        }
        if self.setting.batch_size == 0 || self.setting.batch_size > self.setting.train_events {
            let reason = format!(
                "must be between 1 and the {} training events",
                self.setting.train_events
            );
            return Err(TemporalPlanError::invalid(
                "batch_size",
                self.setting.batch_size,
                reason,
            ));
        }
        if self.reference_batch == 0 {
            return Err(TemporalPlanError::invalid(
                "reference_batch",
                self.reference_batch,
                "must be at least 1",
            ));
        }
        check_ratio("reference_dependency_ratio", self.reference_dependency_ratio)?;
        check_seconds("reference_seconds_per_batch", self.reference_seconds_per_batch)?;
        check_seconds("sync_seconds_per_node", self.sync_seconds_per_node)?;
        if self.refine.first().map(|s| s.refine) != Some(1) {
            return Err(TemporalPlanError::invalid(
                "refine",
                "[..]",
                "must start with the plain batch, refine = 1",
            ));
        }
        for (i, sample) in self.refine.iter().enumerate() {
            if sample.refine > self.setting.batch_size || (i > 0 && sample.refine <= self.refine[i - 1].refine) {
                return Err(TemporalPlanError::invalid(
                    "refine.refine",
                    sample.refine,
                    "must increase and stay within the batch size",
                ));
            }
            check_seconds("refine.seconds_per_batch", sample.seconds_per_batch)?;
            check_ratio("refine.dependency_ratio", sample.dependency_ratio)?;
        }
        if self.refine[0].seconds_per_batch <= 0.0 {
            return Err(TemporalPlanError::invalid(
                "refine.seconds_per_batch",
                0,
                "the plain batch must take some time",
            ));
        }
        if self.windows.is_empty() {
            return Err(TemporalPlanError::invalid(
                "windows",
                "[]",
                "must hold at least one candidate window",
            ));
        }
        for (i, sample) in self.windows.iter().enumerate() {
            if sample.window < self.setting.workers || (i > 0 && sample.window <= self.windows[i - 1].window) {
                return Err(TemporalPlanError::invalid(
                    "windows.window",
                    sample.window,
                    "must increase, at least one event per worker",
                ));
            }
            check_ratio("windows.cross_shard_ratio", sample.cross_shard_ratio)?;
            if !(sample.imbalance.is_finite() && (1.0..=self.setting.workers as f64).contains(&sample.imbalance)) {
                return Err(TemporalPlanError::invalid(
                    "windows.imbalance",
                    sample.imbalance,
                    "must be between 1 and the workers",
                ));
            }
            if !(sample.nodes_per_window.is_finite() && sample.nodes_per_window >= 0.0) {
                return Err(TemporalPlanError::invalid(
                    "windows.nodes_per_window",
                    sample.nodes_per_window,
                    "must be non-negative",
                ));
            }
        }
        Ok(())
    }
}

fn check_seconds(field: &'static str, value: f64) -> Result<(), TemporalPlanError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(TemporalPlanError::invalid(
            field,
            value,
            "must be a finite, non-negative number of seconds",
        ))
    }
}

fn check_ratio(field: &'static str, value: f64) -> Result<(), TemporalPlanError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(TemporalPlanError::invalid(field, value, "must be a share in [0, 1]"))
    }
}

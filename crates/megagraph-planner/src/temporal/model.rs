//! [`TemporalPrediction`]: the predicted epoch of DepBloom at one window and refinement count.
//!
//! From a [`TemporalProfile`]:
//! - **Steps.** A window of `W` events is sharded over the workers; the largest shard
//!   (`W × imbalance / workers` events) sets the window's steps, `ceil(largest / batch)` of them,
//!   and there are `train_events / W` windows per epoch.
//! - **Compute.** A plain step's seconds are a line in its events, fitted through the plain
//!   batch and the reference batch (a fixed step overhead plus seconds per event; with one
//!   size measured, all per event). Refinement adds the measured extra seconds of IMR(c) over
//!   the plain batch, in proportion to the step's events.
//! - **Synchronization.** With more than one worker, each window boundary exchanges the rows
//!   of the nodes the window touched (`nodes_per_window × sync_seconds_per_node`), and the
//!   shared endpoints of cross-shard events are reconciled on top
//!   (`cross_shard_ratio × W × sync_seconds_per_node`).
//! - **Staleness.** The refinement count's intra-chunk dependency ratio.
//!
//! The workers are assumed to run their shards in parallel.

use serde::{Deserialize, Serialize};

use super::profile::{RefineSample, TemporalProfile, WindowSample};

/// The predicted epoch of DepBloom at one window and refinement count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalPrediction {
    /// Events per window.
    pub window: usize,
    /// Chunks per batch.
    pub refine: usize,
    /// Predicted seconds of one training epoch: compute, synchronization and reconciliation.
    pub epoch_seconds: f64,
    /// Seconds of the steps on the critical path (the largest shard of every window).
    pub compute_seconds: f64,
    /// Seconds of window-boundary exchanges of the touched nodes' rows.
    pub sync_seconds: f64,
    /// Seconds reconciling the shared endpoints of cross-shard events.
    pub reconcile_seconds: f64,
    /// Steps per epoch.
    pub steps: usize,
    /// Window-boundary synchronizations per epoch (0 with one worker).
    pub syncs: usize,
    /// Intra-chunk dependency ratio (the staleness proxy; lower is fresher).
    pub staleness: f64,
}

/// Seconds of a plain training step of `events` events: `overhead + per_event × events`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepLine {
    /// Seconds of a step regardless of its events.
    pub overhead: f64,
    /// Seconds per event.
    pub per_event: f64,
}

impl StepLine {
    /// The line through the plain batch and the reference batch, with a non-negative overhead
    /// and slope; all per event when the two sizes are equal or the line would slope down.
    pub(crate) fn fit(profile: &TemporalProfile) -> Self {
        let (b, plain) = (profile.setting.batch_size as f64, profile.refine[0].seconds_per_batch);
        let (r, reference) = (profile.reference_batch as f64, profile.reference_seconds_per_batch);
        let per_event = (plain - reference) / (b - r);
        if profile.setting.batch_size == profile.reference_batch || !per_event.is_finite() || per_event <= 0.0 {
            return Self {
                overhead: 0.0,
                per_event: plain / b,
            };
        }
        let overhead = (plain - per_event * b).max(0.0);
        Self {
            overhead,
            per_event: (plain - overhead) / b,
        }
    }

    fn seconds(self, events: f64) -> f64 {
        self.overhead + self.per_event * events
    }
}

/// The predicted epoch at `window` and `refine` under `line` (the profile's [`StepLine`]).
pub(crate) fn predict(
    profile: &TemporalProfile,
    line: StepLine,
    window: &WindowSample,
    refine: &RefineSample,
) -> TemporalPrediction {
    let train = profile.setting.train_events as f64;
    let batch = profile.setting.batch_size as f64;
    let workers = profile.setting.workers as f64;
    let w = (window.window as f64).min(train);
    let windows = train / w;
    let largest = (w * window.imbalance / workers).max(1.0);
    let steps_per_window = (largest / batch).ceil();
    let step_events = largest / steps_per_window;
    let refine_extra = (refine.seconds_per_batch - profile.refine[0].seconds_per_batch).max(0.0) / batch;
    let step_seconds = line.seconds(step_events) + refine_extra * step_events;
    let compute_seconds = windows * steps_per_window * step_seconds;
    let syncs = if profile.setting.workers > 1 {
        profile.setting.train_events.div_ceil(window.window)
    } else {
        0
    };
    let sync_seconds = syncs as f64 * window.nodes_per_window * profile.sync_seconds_per_node;
    let reconcile_seconds = syncs as f64 * window.cross_shard_ratio * w * profile.sync_seconds_per_node;
    TemporalPrediction {
        window: window.window,
        refine: refine.refine,
        epoch_seconds: compute_seconds + sync_seconds + reconcile_seconds,
        compute_seconds,
        sync_seconds,
        reconcile_seconds,
        steps: (windows * steps_per_window).ceil() as usize,
        syncs,
        staleness: refine.dependency_ratio,
    }
}

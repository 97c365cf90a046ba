//! What a temporal training run reports: per-epoch history and test metrics, as JSON.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::scheme::TemporalScheme;

/// One training epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalEpoch {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Mean training loss (BCE on positives and negatives).
    pub loss: f64,
    /// Validation AP over the whole split (one negative per event).
    pub valid_ap: f64,
    /// Validation ROC AUC.
    pub valid_auc: f64,
    /// Seconds of training (not evaluation) in this epoch.
    pub seconds: f64,
}

/// The outcome of a run. AP is given over the whole split (`test_ap`, the ranking of every
/// positive against every negative) and as TGL reports it, the mean of per-batch APs
/// (`test_ap_batch_mean`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalReport {
    /// Dataset name.
    pub dataset: String,
    /// Model preset.
    pub model: String,
    /// Nodes in the stream.
    pub nodes: usize,
    /// Events in the stream.
    pub events: usize,
    /// Test AP over the whole test split, one negative per event.
    pub test_ap: f64,
    /// Test AP as the mean of per-batch APs (TGL's figure).
    pub test_ap_batch_mean: f64,
    /// Test ROC AUC, one negative per event.
    pub test_auc: f64,
    /// Test MRR against `mrr_negatives` negatives per event (`None` when 0).
    pub test_mrr: Option<f64>,
    /// Negatives per test event for MRR.
    pub mrr_negatives: usize,
    /// Best validation AP.
    pub best_valid_ap: f64,
    /// Epoch of the best validation AP (whose parameters and memory were tested).
    pub best_epoch: usize,
    /// Epochs trained.
    pub epochs_run: usize,
    /// Training events per second of training time.
    pub events_per_second: f64,
    /// Seconds of training over all epochs.
    pub train_seconds: f64,
    /// Every epoch.
    pub history: Vec<TemporalEpoch>,
    /// How several workers shared the run (`None`: the single-worker loop).
    #[serde(default)]
    pub scheme: Option<TemporalScheme>,
    /// Workers.
    #[serde(default = "one")]
    pub workers: usize,
    /// Bytes of node memory (memory rows, update times and mailboxes) the workers published to
    /// and fetched from the shared store per epoch, summed over workers.
    #[serde(default)]
    pub sync_bytes_per_epoch: f64,
    /// Training events each worker ran per epoch.
    #[serde(default)]
    pub events_per_worker: Vec<usize>,
    /// Seconds per step on the critical path, mean over steps: from a step's start to the point
    /// the next step can start (worker 0: its batch, the all-reduce, the optimizer step, the
    /// memory write-back done at once, any wait for a deferred one, and the memory exchange).
    /// Write-backs deferred to the background (critical-path optimization) do not count; the
    /// single-worker loop counts its whole epoch.
    #[serde(default)]
    pub critical_path_seconds_per_batch: f64,
    /// Whether the workers deferred cold memory write-backs off the critical path
    /// ([`TemporalTrainConfig::critical_path`](crate::TemporalTrainConfig::critical_path)).
    #[serde(default)]
    pub critical_path: bool,
}

fn one() -> usize {
    1
}

impl TemporalReport {
    /// Writes the report as pretty JSON, atomically.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        megagraph_train::files::write_json_atomically(path, self)?;
        Ok(())
    }
}

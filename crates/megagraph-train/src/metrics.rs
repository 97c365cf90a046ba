use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// What one epoch did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochMetrics {
    /// Epoch number, from 1.
    pub epoch: usize,
    /// Mean training loss over the epoch's steps.
    pub loss: f64,
    /// Accuracy on the training nodes (evaluation mode, after the epoch).
    pub train_accuracy: f64,
    /// Accuracy on the validation nodes.
    pub valid_accuracy: f64,
    /// Mean cross-entropy on the validation nodes (evaluation mode; metrics written before it
    /// was recorded read as 0).
    #[serde(default)]
    pub valid_loss: f64,
    /// Accuracy on the test nodes.
    pub test_accuracy: f64,
    /// Wall-clock seconds of the epoch (training and evaluation).
    pub seconds: f64,
    /// Learning rate at the epoch's last step.
    pub learning_rate: f64,
}

/// The result of a training run, as written by `--metrics-out`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Dataset name.
    pub dataset: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of stored (directed) edges after symmetrization.
    pub edges: usize,
    /// Number of model parameters.
    pub params: usize,
    /// Number of sequences per epoch.
    pub sequences: usize,
    /// Nodes per sequence.
    pub seq_len: usize,
    /// Epochs run (including those of a resumed run).
    pub epochs_run: usize,
    /// Optimizer steps taken in total (including those of a resumed run).
    #[serde(default)]
    pub steps: usize,
    /// Epoch with the best validation accuracy.
    pub best_epoch: usize,
    /// Best validation accuracy.
    pub best_valid_accuracy: f64,
    /// Test accuracy of the best-validation model.
    pub test_accuracy: f64,
    /// Seconds spent in epochs (training and evaluation).
    pub train_seconds: f64,
    /// `train_seconds / epochs_run`.
    pub seconds_per_epoch: f64,
    /// Peak resident set size of the process in bytes (`None` where the OS does not say).
    pub peak_rss_bytes: Option<u64>,
    /// Per rank (rank order; one entry on a single device): bytes of the largest distance index
    /// it held for a step (its rows, dense or sparse as chosen by fill).
    #[serde(default)]
    pub index_bytes_per_rank: Vec<usize>,
    /// Per rank: what a dense `u8` index of the same rows would take.
    #[serde(default)]
    pub dense_index_bytes_per_rank: Vec<usize>,
    /// Per rank: peak bytes of a step from the runtime's memory meter (`None` where it cannot
    /// measure).
    #[serde(default)]
    pub rank_peak_bytes: Vec<Option<usize>>,
    /// Seconds spent grouping the nodes into sequences (partitioning).
    #[serde(default)]
    pub partition_seconds: f64,
    /// Seconds spent building distance indexes for the batches, summed over the run (worker
    /// threads building at once each count).
    #[serde(default)]
    pub index_seconds: f64,
    /// Wall-clock seconds of each optimizer step this run took, in order (a step ends when its
    /// loss is back on the host, so device work is included; the first steps include the
    /// kernels' compilation). Steps of epochs before a resume are not included.
    #[serde(default)]
    pub step_seconds: Vec<f64>,
    /// Why training stopped.
    pub stopped: String,
    /// One entry per epoch.
    pub history: Vec<EpochMetrics>,
    /// With self-training (`[training] self_training_rounds`): one entry per round, the first
    /// run included; the rest of the report is the kept round's. Empty without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub self_training: Vec<SelfTrainingRound>,
    /// With a snapshot ensemble (`[training] ensemble_epochs`): its epochs and accuracies;
    /// `best_valid_accuracy` and `test_accuracy` above are then the ensemble's, and the best
    /// epoch's own figures are in `history`. `None` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<EnsembleReport>,
}

/// The snapshot ensemble of a run (`[training] ensemble_epochs`), as the report lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnsembleReport {
    /// The epochs whose softmax predictions were averaged, best validation accuracy first.
    pub epochs: Vec<usize>,
    /// Validation accuracy of the averaged predictions.
    pub valid_accuracy: f64,
    /// Test accuracy of the averaged predictions.
    pub test_accuracy: f64,
}

/// One round of self-training, as the report lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfTrainingRound {
    /// Round number, 0 for the first run (no pseudo-labels).
    pub round: usize,
    /// Nodes that trained with a pseudo-label in this round.
    pub pseudo_labels: usize,
    /// The round's best validation accuracy.
    pub best_valid_accuracy: f64,
    /// Test accuracy of the round's best model.
    pub test_accuracy: f64,
    /// Epochs the round ran.
    pub epochs_run: usize,
    /// Whether the run kept this round (the best validation accuracy, the earliest on a tie).
    pub kept: bool,
}

impl TrainReport {
    /// Writes the report as pretty JSON, atomically (temporary file, then rename).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        crate::files::write_json_atomically(path, self)
    }
}

/// Peak resident set size of this process in bytes (Linux: `VmHWM` of `/proc/self/status`).
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_reported_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_bytes().unwrap() > 1 << 20);
        }
    }
}

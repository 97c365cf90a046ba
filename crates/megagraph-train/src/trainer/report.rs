//! The report step of the training loop: an epoch's metrics into the run's state, and the
//! run's [`TrainReport`].

use crate::checkpoint::TrainState;
use crate::engine::RankFigures;
use crate::metrics::{EpochMetrics, TrainReport, peak_rss_bytes};

use super::NodeClassificationTrainer;

impl TrainState {
    /// Records a finished epoch: its metrics join the history, and a better validation
    /// accuracy than every earlier epoch's becomes the best (returns whether it did).
    pub(crate) fn record_epoch(&mut self, metrics: EpochMetrics) -> bool {
        let improved = metrics.valid_accuracy > self.best_valid_accuracy;
        if improved {
            self.best_valid_accuracy = metrics.valid_accuracy;
            self.best_epoch = metrics.epoch;
            self.epochs_without_improvement = 0;
        } else {
            self.epochs_without_improvement += 1;
        }
        self.train_seconds += metrics.seconds;
        self.epoch = metrics.epoch;
        self.history.push(metrics);
        improved
    }
}

impl NodeClassificationTrainer<'_> {
    /// The report of a run that ended in `state` with a best model of `params` parameters,
    /// what each rank held at most, the seconds of each step it took, and why it `stopped`.
    pub(super) fn report(
        &self,
        state: TrainState,
        params: usize,
        figures: &[RankFigures],
        step_seconds: Vec<f64>,
        stopped: String,
    ) -> TrainReport {
        let best_test = state
            .history
            .iter()
            .find(|m| m.epoch == state.best_epoch)
            .map_or(f64::NAN, |m| m.test_accuracy);
        let dataset = &self.data.dataset;
        TrainReport {
            dataset: dataset.name.clone(),
            nodes: dataset.graph.num_nodes(),
            edges: dataset.graph.num_edges(),
            params,
            sequences: self.data.num_sequences(),
            seq_len: self.data.seq_len,
            epochs_run: state.epoch,
            steps: state.step,
            best_epoch: state.best_epoch,
            best_valid_accuracy: state.best_valid_accuracy,
            test_accuracy: best_test,
            train_seconds: state.train_seconds,
            seconds_per_epoch: state.train_seconds / state.epoch.max(1) as f64,
            peak_rss_bytes: peak_rss_bytes(),
            index_bytes_per_rank: figures.iter().map(|f| f.index_bytes).collect(),
            dense_index_bytes_per_rank: figures.iter().map(|f| f.dense_index_bytes).collect(),
            rank_peak_bytes: figures.iter().map(|f| f.peak_bytes).collect(),
            partition_seconds: self.data.partition_seconds,
            index_seconds: self.data.index_seconds(),
            step_seconds,
            stopped,
            history: state.history,
            self_training: Vec::new(),
            ensemble: None,
        }
    }
}

//! What a [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) reports while it runs
//! ([`TrainObserver`]) and what it returns ([`TrainOutcome`]).

use burn::tensor::backend::Backend;
use megagraph_models::GraphTransformer;

use crate::metrics::{EpochMetrics, TrainReport};

/// Receives progress while a [`NodeClassificationTrainer`](crate::NodeClassificationTrainer)
/// runs (progress bars, logs).
pub trait TrainObserver {
    /// An epoch starts; it will take `steps` optimizer steps.
    fn epoch_started(&mut self, _epoch: usize, _epochs: usize, _steps: usize) {}
    /// An optimizer step finished with `loss`.
    fn step_finished(&mut self, _loss: f64) {}
    /// An epoch finished.
    fn epoch_finished(&mut self, _metrics: &EpochMetrics, _improved: bool) {}
    /// The training steps of `epoch` ran; `full_steps` are those (indices within the epoch)
    /// that ran full attention, the others ran sparse attention (the `[attention]` section).
    fn attention_steps(&mut self, _epoch: usize, _full_steps: &[usize]) {}
    /// Under `reform_threshold = "tuned"`, `β`'s tuner chose `beta` after `epoch`: the `β` of
    /// elastic computation reformation in the next epoch.
    fn reform_beta(&mut self, _epoch: usize, _beta: f64) {}
    /// Asked after each epoch (and its checkpoint): `true` interrupts training with
    /// [`TrainError::Interrupted`](crate::TrainError::Interrupted); a later run can `--resume`.
    fn should_stop(&mut self, _epoch: usize) -> bool {
        false
    }
}

/// A [`TrainObserver`] that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl TrainObserver for Quiet {}

/// The outcome of training: the best-validation model and the report.
pub struct TrainOutcome<B: Backend> {
    /// The model with the best validation accuracy.
    pub model: GraphTransformer<B>,
    /// Metrics of the run.
    pub report: TrainReport,
}

//! [`TemporalObserver`]: what a temporal training run tells its caller as it goes.

use crate::report::TemporalEpoch;

/// Progress callbacks of a temporal training run (the command line draws bars from them).
/// Every method has a default that does nothing.
pub trait TemporalObserver {
    /// Training epoch `epoch` (1-based) starts with `batches` batches.
    fn epoch_started(&mut self, _epoch: usize, _batches: usize) {}
    /// A training batch finished with `loss`.
    fn batch_finished(&mut self, _loss: f64) {}
    /// An evaluation of `split` ("valid" or "test") starts with `batches` batches.
    fn evaluation_started(&mut self, _split: &'static str, _batches: usize) {}
    /// An evaluation batch finished.
    fn evaluation_batch_finished(&mut self) {}
    /// An epoch finished, validated and (when configured) checkpointed.
    fn epoch_finished(&mut self, _epoch: &TemporalEpoch) {}
    /// Asked after every training batch: `true` stops the run at once, losing the epoch in
    /// progress (as a crash would); the last checkpoint stays.
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// An observer that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl TemporalObserver for Quiet {}

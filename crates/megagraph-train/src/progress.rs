//! [`PrepareProgress`]: progress of the long preparation steps, for progress bars.

/// Receives progress of the long steps of [`prepare_with_progress`](crate::prepare_with_progress)
/// (graph partitioning into sequences, distance indexes). Library code calls it; the command
/// line draws progress bars with it. Every method has an empty default.
pub trait PrepareProgress: Sync {
    /// A step starts: `step` (e.g. "partitioning") will count `total` `unit`s.
    fn start(&self, _step: &str, _total: usize, _unit: &str) {}
    /// `done` more units of the current step are finished (called from worker threads).
    fn advance(&self, _done: usize) {}
    /// The current step is finished.
    fn finish(&self) {}
}

impl PrepareProgress for crate::observer::Quiet {}

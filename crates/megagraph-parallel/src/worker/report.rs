//! [`RankReport`]: what one rank measured during a step.

use crate::mesh::RankCoord;

/// What one rank measured during a step.
#[derive(Clone, Debug, PartialEq)]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Its coordinates.
    pub coord: RankCoord,
    /// Sum of this rank's micro-batch losses (non-zero on the last stage only).
    pub loss: f64,
    /// The most micro-batches it held between their forward and backward passes.
    pub max_in_flight: usize,
    /// Wall time of its step, in seconds.
    pub seconds: f64,
    /// `seconds` minus the time spent waiting for peers (pipeline messages, ring blocks, the
    /// gradient all-reduce): the rank's own work, what a balanced plan equalizes.
    pub busy_seconds: f64,
    /// Peak bytes allocated by its thread during the step, when a
    /// [`CountingAllocator`](crate::CountingAllocator) is the global allocator.
    pub peak_bytes: Option<usize>,
    /// Bytes of the largest distance index (its block's rows, dense or sparse) it held for a
    /// micro-batch of the step.
    pub index_bytes: usize,
    /// What a dense `u8` index of the same rows would take (`batch x block rows x padded
    /// sequence`).
    pub dense_index_bytes: usize,
    /// Bytes it sent to its context group during the step: ring blocks (keys, values, masks,
    /// key/value gradients) or Ulysses all-to-all parts; 0 without context parallelism.
    pub context_sent_bytes: u64,
}

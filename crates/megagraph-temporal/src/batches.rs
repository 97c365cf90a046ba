//! How an epoch's events are cut into batches, and the random keys of each batch.

use std::ops::Range;

use megagraph_models::dropout::DropoutScope;

/// Which split a batch belongs to, for its random keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Phase {
    /// Training epoch `0` (1-based).
    Train(usize),
    /// The validation split.
    Valid,
    /// The test split.
    Test,
}

impl Phase {
    /// The negative sampler's epoch key: training negatives change every epoch, evaluation
    /// negatives never do (so validation APs compare across epochs).
    pub(crate) fn negative_key(self) -> u64 {
        match self {
            Phase::Train(epoch) => epoch as u64,
            Phase::Valid => u64::MAX - 1,
            Phase::Test => u64::MAX,
        }
    }

    /// The uniform sampler's key of batch `batch`.
    pub(crate) fn sampler_key(self, batch: usize) -> u64 {
        (self.negative_key() << 32) ^ batch as u64
    }

    /// The dropout masks of batch `batch` in a run seeded `seed`, for as long as the returned
    /// scope lives on this thread: drawn from the Philox stream keyed by the batch (its
    /// sampler key), so they are a function of the seed and the batch alone, whichever worker
    /// trains it and whatever the other workers draw meanwhile.
    pub(crate) fn dropout_scope(self, seed: u64, batch: usize) -> DropoutScope {
        DropoutScope::enter(seed, self.sampler_key(batch))
    }
}

/// Consecutive ranges of at most `size` events covering `range`.
pub(crate) fn batches(range: Range<usize>, size: usize) -> Vec<Range<usize>> {
    range
        .clone()
        .step_by(size.max(1))
        .map(|start| start..(start + size).min(range.end))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_the_range_in_order() {
        assert_eq!(batches(3..10, 3), vec![3..6, 6..9, 9..10]);
        assert_eq!(batches(0..0, 3), Vec::<Range<usize>>::new());
    }
}

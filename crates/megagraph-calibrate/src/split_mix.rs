//! [`SplitMix`]: the deterministic pseudo-random source of the synthetic inputs that the profiler
//! and the validation runs measure with.

use megagraph_graph::hash::{GOLDEN, splitmix64};

/// SplitMix64: deterministic pseudo-random values for synthetic inputs.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        splitmix64(self.0)
    }

    /// Uniform in `[-1, 1)`.
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

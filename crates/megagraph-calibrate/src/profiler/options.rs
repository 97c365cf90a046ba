//! How the profiler measures ([`ProfilerOptions`]), what it reports while it does
//! ([`ProfileProgress`]) and why it fails ([`MeasureError`]).

use crate::overhead::OverheadError;
use megagraph_kernels::AttentionError;
use megagraph_planner::{ProfileError, ProfileLadder, ProfiledPart, WorkloadError};
use serde::{Deserialize, Serialize};

/// How [`measure_profile`](super::measure_profile) measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfilerOptions {
    /// Sizes to measure: `rows` for the embedding, dense-layer and head parts, `blocks` for the
    /// attention block edge. Default: [`ProfilerOptions::cpu_ladder`].
    pub ladder: ProfileLadder,
    /// Untimed runs before the timed ones, per part and size. Default: 2.
    pub warmup: usize,
    /// Timed runs per part and size; the median is kept. Default: 5.
    pub repeats: usize,
    /// Copies of every measurement run at once on separate threads (the ranks sharing this
    /// machine). Default: 1.
    pub concurrency: usize,
    /// Seed of the random inputs and parameters. Default: 7.
    pub seed: u64,
    /// Bytes written between each forward and backward pass to evict the caches (0: none), as
    /// happens in a real stage whose activations between a layer's forward and its backward
    /// exceed them. Default: 0.
    #[serde(default)]
    pub evict_bytes: usize,
}

/// Where [`measure_profile`](super::measure_profile) is: reported after every run of a part and size (the profiler
/// makes `warmup + repeats` passes over the whole ladder).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProfileProgress {
    /// The part just measured.
    pub part: ProfiledPart,
    /// Its batch (sequences).
    pub batch: usize,
    /// Its size.
    pub size: usize,
    /// Runs done so far.
    pub done: usize,
    /// Runs in all: ladder points times `warmup + repeats`.
    pub total: usize,
}

/// Why a profile could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The model shape is invalid.
    #[error("invalid model shape: {0}")]
    Shape(#[from] WorkloadError),
    /// The ladder has fewer than 2 distinct positive sizes for a part.
    #[error("profile ladder {which} = {sizes:?}: need at least 2 distinct positive sizes")]
    BadLadder {
        /// `rows` or `blocks`.
        which: &'static str,
        /// The offending sizes.
        sizes: Vec<usize>,
    },
    /// `repeats` or `concurrency` is 0.
    #[error("profiler option {field} = 0: it must be at least 1")]
    ZeroOption {
        /// The option.
        field: &'static str,
    },
    /// The memory meter cannot measure here.
    #[error(
        "memory cannot be measured: {meter} is not available (on CPU, install \
         megagraph_parallel::CountingAllocator as the program's #[global_allocator])"
    )]
    NoMemoryMeter {
        /// The meter (its `Debug` form).
        meter: String,
    },
    /// The attention op refused its inputs.
    #[error("attention op at block {size}: {source}")]
    Attention {
        /// The block edge.
        size: usize,
        /// The op's error.
        source: AttentionError,
    },
    /// A measuring thread panicked.
    #[error("profiling {part:?} at size {size} panicked: {message}")]
    Panicked {
        /// The part.
        part: ProfiledPart,
        /// The size.
        size: usize,
        /// The panic message.
        message: String,
    },
    /// A measuring thread panicked outside a measurement.
    #[error("a profiling thread panicked: {message}")]
    ThreadPanicked {
        /// The panic message.
        message: String,
    },
    /// The runtime overhead step failed.
    #[error("measuring the runtime's memory overhead (a one-layer training step): {0}")]
    Overhead(#[from] OverheadError),
    /// The backend could not be set up.
    #[error("the backend could not run the profile: {0}")]
    Backend(String),
    /// The measured table is invalid (e.g. a non-finite time).
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        Self {
            ladder: Self::cpu_ladder(),
            warmup: 2,
            repeats: 5,
            concurrency: 1,
            seed: 7,
            evict_bytes: 0,
        }
    }
}

impl ProfilerOptions {
    /// A ladder for CPU workers: rows 64 ..= 8192 and blocks 32 ..= 2048, powers of two with the
    /// midpoints `1.5 * 2^k` from 256 (where times leave the overhead-bound regime); attention
    /// at batches 1, 2, 4 and 8, above batch 1 up to `batch * block^2 = 2^23`.
    pub fn cpu_ladder() -> ProfileLadder {
        ProfileLadder {
            rows: doubling(6, 13, 256),
            blocks: doubling(5, 11, 256),
            attention_batches: vec![1, 2, 4, 8],
            max_attention_pairs: 1 << 23,
        }
    }

    /// A ladder for GPUs: rows 512 ..= 65536 and blocks 128 ..= 16384, powers of two with the
    /// midpoints from 2048 (below it a GPU is bound by launch overhead); attention at batches
    /// 1, 2, 4 and 8, above batch 1 up to `batch * block^2 = 2^28`.
    pub fn gpu_ladder() -> ProfileLadder {
        ProfileLadder {
            rows: doubling(9, 16, 2048),
            blocks: doubling(7, 14, 2048),
            attention_batches: vec![1, 2, 4, 8],
            max_attention_pairs: 1 << 28,
        }
    }
}

impl ProfilerOptions {
    /// [`MeasureError::ZeroOption`] when `repeats` or `concurrency` is 0.
    pub(crate) fn check(&self) -> Result<(), MeasureError> {
        for (field, value) in [("repeats", self.repeats), ("concurrency", self.concurrency)] {
            if value == 0 {
                return Err(MeasureError::ZeroOption { field });
            }
        }
        Ok(())
    }
}

/// `2^low ..= 2^high`, with the midpoint `1.5 * 2^p` after every power from `midpoints_from`.
fn doubling(low: u32, high: u32, midpoints_from: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    for p in low..=high {
        let size = 1usize << p;
        sizes.push(size);
        if size >= midpoints_from && p < high {
            sizes.push(size + size / 2);
        }
    }
    sizes
}

/// Every measurement of `ladder`: `(part, batch, size)` in table order.
pub fn ladder_points(ladder: &ProfileLadder) -> Vec<(ProfiledPart, usize, usize)> {
    let rows = ladder.row_points();
    let mut jobs = Vec::new();
    for part in ProfiledPart::ALL {
        if part == ProfiledPart::Attention {
            jobs.extend(
                ladder
                    .attention_points()
                    .into_iter()
                    .map(|(batch, size)| (part, batch, size)),
            );
        } else {
            jobs.extend(rows.iter().map(|&size| (part, 1, size)));
        }
    }
    jobs
}

/// Sorted distinct sizes of a ladder entry, or an error naming it.
pub(super) fn sizes(which: &'static str, sizes: &[usize]) -> Result<Vec<usize>, MeasureError> {
    let mut distinct = sizes.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 || distinct[0] == 0 {
        return Err(MeasureError::BadLadder {
            which,
            sizes: sizes.to_vec(),
        });
    }
    Ok(distinct)
}

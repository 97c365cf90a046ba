//! [`SearchOptions`]: how the plan search is run (micro-batch range, memory headroom, ties,
//! profile fitting, context mode), read by the search and by the explanation of its choices.

use crate::latency::FitOptions;
use megagraph_layout::CpMode;
use serde::{Deserialize, Serialize};

/// Options of the search ([`plan`](crate::plan)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Largest micro-batch count tried (every divisor of a replica's sequences per step up to
    /// this). Default: 1024.
    pub max_micro_batches: usize,
    /// Fraction of device memory a plan may use; the rest is left for the allocator's
    /// fragmentation and the runtime. Default: 0.95.
    pub memory_fraction: f64,
    /// Plans within this fraction of the fastest predicted step time count as equally fast; of
    /// those, the one with the smallest peak memory is ranked first. Default: 0.01.
    pub time_tolerance: f64,
    /// How profiles are fitted.
    pub fit: FitOptions,
    /// The context mode every plan uses (`"ring"` or `"ulysses"`); `None` (the default): both
    /// are tried for every `cp > 1` (Ulysses only where `cp` divides the heads) and the faster
    /// that fits is kept.
    #[serde(default)]
    pub cp_mode: Option<CpMode>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            max_micro_batches: 1024,
            memory_fraction: 0.95,
            time_tolerance: 0.01,
            fit: FitOptions::default(),
            cp_mode: None,
        }
    }
}

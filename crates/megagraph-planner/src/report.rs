//! [`PlanReport`]: what a search found, what it rejected and why, and the problem it answered.

use crate::memory::{MemoryBreakdown, format_bytes};
use crate::plan::Plan;
use megagraph_layout::{ParallelConfig, ParallelConfigError};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// A configuration the search did not keep, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rejected {
    /// The configuration. For layouts rejected before micro-batches were chosen,
    /// `micro_batches` is 1 and `stage_layers` the uniform split (empty when `pp > layers`); for
    /// out-of-memory rejections, the split with the smallest memory excess.
    pub config: ParallelConfig,
    /// Why it was rejected.
    pub reason: RejectReason,
}

/// Why a configuration was rejected.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RejectReason {
    /// The degrees do not fit the model or workload (e.g. `cp` does not divide `S`,
    /// `pp > layers`, `dp` does not divide the sequences per step).
    Invalid {
        /// The validation error (serialized as its message).
        #[serde(serialize_with = "serialize_display")]
        error: ParallelConfigError,
    },
    /// No layer split fits in memory. Reported for the split with the smallest excess.
    OutOfMemory {
        /// The stage over the limit (the fullest one).
        stage: usize,
        /// Bytes that stage needs per device.
        needed_bytes: u64,
        /// Usable bytes per device.
        limit_bytes: u64,
        /// That stage's memory by term.
        breakdown: MemoryBreakdown,
    },
}

/// The outcome of a search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanReport {
    /// The fastest plan that fits (`candidates[0]`).
    pub best: Plan,
    /// Every plan that fits, fastest first.
    pub candidates: Vec<Plan>,
    /// Every configuration that was rejected, with its reason.
    pub rejected: Vec<Rejected>,
    /// Wall-clock seconds the search took.
    pub search_seconds: f64,
    /// Memory of one device of each stage of the best plan.
    pub best_memory: Vec<MemoryBreakdown>,
    /// Why the best plan's context mode (`ring` or `ulysses`), in words.
    pub cp_mode_reason: String,
    /// What was searched.
    pub setting: SearchSetting,
}

/// The problem a [`PlanReport`] answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchSetting {
    /// Cluster name.
    pub cluster: String,
    /// Devices used.
    pub devices: usize,
    /// Usable bytes per device.
    pub memory_limit_bytes: u64,
    /// Model layers.
    pub layers: usize,
    /// Nodes per sequence.
    pub seq_len: usize,
    /// Sequences per step.
    pub sequences_per_step: usize,
}

impl RejectReason {
    /// For out-of-memory rejections, the bytes over the limit.
    pub fn over_by_bytes(&self) -> Option<u64> {
        match self {
            Self::OutOfMemory {
                needed_bytes,
                limit_bytes,
                ..
            } => Some(needed_bytes.saturating_sub(*limit_bytes)),
            Self::Invalid { .. } => None,
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid { error } => write!(f, "{error}"),
            Self::OutOfMemory {
                stage,
                needed_bytes,
                limit_bytes,
                breakdown,
            } => {
                let (term, bytes) = breakdown.largest();
                write!(
                    f,
                    "out of memory on stage {stage} by {}: needs {} of {} (largest: {term} {}; in flight: {} micro-batch(es))",
                    format_bytes(needed_bytes.saturating_sub(*limit_bytes)),
                    format_bytes(*needed_bytes),
                    format_bytes(*limit_bytes),
                    format_bytes(bytes),
                    breakdown.in_flight_micro_batches
                )
            }
        }
    }
}

impl std::error::Error for RejectReason {}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "pp={} cp={} dp={} micro_batches={}: {}",
            c.pp, c.cp, c.dp, c.micro_batches, self.reason
        )
    }
}

fn serialize_display<T: fmt::Display, S: Serializer>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

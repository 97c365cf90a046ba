//! The DepBloom planner hook: a window and an intra-batch memory refinement count for
//! multi-worker temporal training, from a measured profile. The same shape as the Graph
//! Transformer planner:
//!
//! - **Profile** ([`TemporalProfile`]): step seconds per refinement count and of a reference
//!   small batch, the window-boundary synchronization seconds per node, and per candidate
//!   window the stream's cross-shard ratio, shard imbalance and nodes touched. Measured by
//!   `megagraph-temporal` on the real backend and dataset; stored as JSON.
//! - **Model** ([`TemporalPrediction`], `model.rs`): epoch seconds per (window, refinement
//!   count): compute on the largest shard, window-boundary syncs, reconciliation of
//!   cross-shard events; staleness as the intra-chunk dependency ratio.
//! - **Search** ([`plan_temporal`]): the refinement count by staleness under a time budget,
//!   then the window by predicted epoch time, into a [`TemporalPlan`] whose
//!   [`explain`](TemporalPlan::explain) prints the candidates and the numbers that decided.

mod error;
mod explain;
mod model;
mod profile;
mod search;
#[cfg(test)]
mod tests;

pub use error::TemporalPlanError;
pub use model::TemporalPrediction;
pub use profile::{RefineSample, TemporalProfile, TemporalSetting, WindowSample};
pub use search::{
    RefineCandidate, RefineReason, TIME_BUDGET, TemporalPlan, WINDOW_TOLERANCE, WindowCandidate, plan_temporal,
};

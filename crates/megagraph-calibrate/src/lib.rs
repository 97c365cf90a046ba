//! Measure what megagraph's planner predicts, on this machine: the profiler that fills a
//! [`ProfileTable`](megagraph_planner::ProfileTable), the validation that runs plans on the
//! local mesh and compares them with their predictions, and the runtime's memory overhead.
//!
//! The planner (`megagraph-planner`) is pure: specs, cost models, search. This crate is its
//! measuring edge, on the Burn runtime (`megagraph-parallel`):
//!
//! - **Profile.** [`measure_profile`] times the model's parts over a ladder of sizes on a
//!   backend; [`cached_profile`] keeps measured tables in a cache folder, one file per key,
//!   ladder and concurrency. [`runtime_overhead_bytes`] realizes one training step to measure
//!   what a rank holds beyond the memory model's terms.
//! - **Validate.** [`validate_plans`] runs plans in turns on worker threads and records their
//!   measured step time and peak memory ([`ValidationReport`]);
//!   [`validate_plans_in_turn`] is the whole protocol of `megagraph plan --validate`: with a
//!   measured profile, that profile is measured again between the rounds ([`InTurnProfile`])
//!   and every plan predicted again from it.
//! - **Realize.** [`init_model`] and [`SyntheticSource`] build the real model and random
//!   batches of a [`ModelShape`](megagraph_planner::ModelShape); [`model_shape`] goes back.
//!
//! ```no_run
//! use std::sync::Arc;
//! use burn::backend::{Autodiff, Flex};
//! use megagraph_calibrate::{ProfilerOptions, ThreadAllocatorMeter, measure_profile};
//! use megagraph_planner::ModelShape;
//!
//! let table = measure_profile::<Autodiff<Flex>>(
//!     &ModelShape::paper(),
//!     "flex",
//!     "cpu",
//!     &Default::default(),
//!     Arc::new(ThreadAllocatorMeter),
//!     &ProfilerOptions::default(),
//!     &mut |_| {},
//! )?;
//! println!("{table}");
//! # Ok::<(), megagraph_calibrate::MeasureError>(())
//! ```

#![warn(missing_docs)]

mod edges;
mod overhead;
mod profiler;
mod protocol;
mod realize;
mod split_mix;
mod validate;

pub use megagraph_parallel::{MemoryMeter, ThreadAllocatorMeter};
pub use overhead::{OverheadError, runtime_overhead_bytes};
pub use profiler::{
    CacheStatus, InTurnProfile, MeasureError, ProfileProgress, ProfilerOptions, cached_profile,
    ladder_points, measure_profile, measured_cache_path,
};
pub use protocol::{CalibrateError, InTurn, validate_plans_in_turn};
pub use realize::{SyntheticSource, init_model, model_config, model_shape};
pub use validate::{
    InTurnSummary, PlansToValidate, ValidateError, ValidatedPlan, ValidationOptions, ValidationProgress,
    ValidationReport, validate_plans,
};

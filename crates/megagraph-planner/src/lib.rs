#![warn(missing_docs)]
//! Model and search hybrid parallel plans (`pp x cp x dp`) for megagraph's Graph Transformers.
//!
//! The planner is pure: a plan is a function of specs (a [`ClusterSpec`], a [`ModelShape`], a
//! [`Workload`]) and a [`ProfileTable`]; nothing here runs Burn. Measuring real layers and
//! running plans to check them is `megagraph-calibrate`'s job.
//!
//! **Profile.** A [`ProfileTable`] holds forward/backward seconds and saved/peak bytes of the
//! model's parts (embedding, dense part of a layer, one attention block, head) at a ladder of
//! sizes, measured by `megagraph-calibrate`'s profiler (read with [`ProfileTable::load`]) or
//! estimated by [`analytic_profile`] from a [`ClusterSpec`]'s compute hints.
//!
//! **Model.** Each part's samples are fitted with [`PiecewiseLinear`] functions whose breakpoints
//! come from the data; the cost model adds ring attention (communication overlapped with block
//! compute), pipeline transfers, the 1F1B schedule and gradient all-reduces (alpha-beta links,
//! intra- or inter-node by placement), and itemizes memory per stage ([`MemoryBreakdown`]).
//!
//! **Search.** Every layout of the devices, every micro-batch count, and for each the exact best
//! layer-to-stage split under the memory limit ([`optimal_partition`]), ranked into a
//! [`PlanReport`] whose [`explain`](PlanReport::explain) prints the reasoning. [`evaluate`]
//! predicts one given [`ParallelConfig`], [`predict_memory`] only its memory.
//!
//! **Temporal training** ([`temporal`]): the same Profile → Model → Search shape suggests
//! DepBloom's window and intra-batch refinement count ([`temporal::plan_temporal`]).
//!
//! ```no_run
//! use megagraph_planner::{ClusterSpec, ModelShape, SearchOptions, Workload, plan_analytic};
//!
//! let cluster = ClusterSpec::from_toml_file("configs/clusters/h200-8x-nvlink.toml")?;
//! let workload = Workload { seq_len: 65_536, sequences_per_step: 32, dtype_bytes: 4, near_pairs_per_row: None };
//! let report = plan_analytic(&cluster, &ModelShape::paper(), &workload, &SearchOptions::default())?;
//! println!("{}", report.explain());
//! let config = report.best.layout; // a ParallelConfig
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod api;
mod cluster;
mod comm;
mod context_exchange;
mod cost;
mod cp_choice;
mod explain;
mod fitted;
mod latency;
mod memory;
mod mesh;
mod partition;
mod plan;
mod report;
mod profile;
mod schedule;
mod search;
mod search_options;
mod sharing;
mod stage_pass;
mod simulated;
pub mod temporal;
mod workload;

pub use api::{
    Evaluation, PlanError, cluster_analytic_profile, evaluate, plan, plan_analytic, predict_memory,
};
pub use cluster::{ClusterError, ClusterSpec, ComputeHints, LinkSpec};
pub use context_exchange::{ContextExchange, ContextGroup, ULYSSES_ALL_TO_ALLS_PER_LAYER};
pub use latency::{FitOptions, PiecewiseLinear};
pub use megagraph_layout::{CpMode, ParallelConfig, ParallelConfigError};
pub use memory::{MemoryBreakdown, format_bytes};
pub use partition::{Partition, optimal_partition};
pub use profile::{
    PassRatios, ProfileError, ProfileKey, ProfileLadder, ProfileSample, ProfileTable,
    ProfiledPart, SoloRatios, analytic_profile,
};
pub use schedule::{BackwardOverlap, one_forward_one_backward_seconds};
pub use plan::{Measurement, Plan, Prediction};
pub use report::{PlanReport, RejectReason, Rejected, SearchSetting};
pub use search::SearchError;
pub use search_options::SearchOptions;
pub use sharing::MachineSharing;
pub use stage_pass::StagePass;
pub use simulated::{SimulatedReport, SimulatedStudy};
pub use workload::{ModelShape, Workload, WorkloadError};

//! The layout of a hybrid `pp x cp x dp` run ([`ParallelConfig`]) and the order in which a
//! pipeline stage runs its micro-batches ([`one_forward_one_backward`]).
//!
//! Both the runtime (`megagraph-parallel`, which trains with a layout) and the planner
//! (`megagraph-planner`, which searches one) use these; this crate holds them so that the
//! planner needs no Burn runtime.
//!
//! ```
//! use megagraph_layout::{ParallelConfig, PipelineAction, one_forward_one_backward};
//!
//! let config = ParallelConfig::uniform(2, 1, 1, 2, 4)?;
//! assert_eq!(config.stage_layers, vec![2, 2]);
//! assert_eq!(
//!     one_forward_one_backward(1, config.pp, config.micro_batches),
//!     [PipelineAction::Forward(0), PipelineAction::Backward(0), PipelineAction::Forward(1), PipelineAction::Backward(1)]
//! );
//! # Ok::<(), megagraph_layout::ParallelConfigError>(())
//! ```

#![warn(missing_docs)]

mod config;
mod cp_mode;
mod schedule;

pub use config::{ParallelConfig, ParallelConfigError};
pub use cp_mode::CpMode;
pub use schedule::{PipelineAction, max_in_flight, one_forward_one_backward};

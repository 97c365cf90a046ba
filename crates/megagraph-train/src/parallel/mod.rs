//! Training on a `pp x cp x dp` mesh: the dataset as a batch source of
//! [`megagraph_parallel::ParallelTrainer`], and the layout of a run from the `[mesh]` section,
//! a plan file or the planner.

mod layout;
mod machine;
mod source;

pub use layout::{StepShape, resolve_layout};
pub use machine::Machine;
pub use source::DatasetSource;

//! [`ParallelTrainer`]: the front door. It validates a
//! [`ParallelConfig`](crate::ParallelConfig), starts one worker thread per rank, runs optimizer
//! steps on the mesh and gathers the parameters back.

mod coordinate;
mod optimizer;
mod options;
mod parallel_trainer;
mod step;

pub use optimizer::OptimizerRecord;
pub use options::{InjectedFault, TrainerOptions};
pub use parallel_trainer::ParallelTrainer;
pub use step::StepOutput;

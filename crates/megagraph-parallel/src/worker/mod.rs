//! One rank's thread: its stage's parameters and optimizer, the 1F1B schedule over its
//! replica's micro-batches with ring attention inside every layer, and the gradient all-reduce.

mod backward;
mod forward;
mod pipeline;
mod protocol;
mod rank;
mod report;
mod run;
mod step;

pub(crate) use protocol::{Command, Reply, ReplyBody, StepPlan, WorkerSetup};
pub use report::RankReport;
pub(crate) use run::run;

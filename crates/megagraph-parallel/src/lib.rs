//! placeholder

pub mod config;
pub use config::{ParallelConfig, ParallelConfigError};

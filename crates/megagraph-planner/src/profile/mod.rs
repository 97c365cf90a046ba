//! [`ProfileTable`]: measured (or estimated) forward/backward seconds and memory of the model's
//! parts at a ladder of sizes, stored as JSON ([`ProfileTable::load`], [`ProfileTable::save`]).
//!
//! The parts and what their samples hold are described on [`ProfileTable`].
//!
//! Real measurements come from `megagraph-calibrate`'s profiler (which times Burn layers);
//! [`analytic_profile`] estimates the same table from FLOP and byte counts for simulated devices.

mod analytic;
mod display;
mod error;
mod io;
mod ladder;
mod part;
mod solo;
mod table;

pub use analytic::analytic_profile;
pub use error::ProfileError;
pub use ladder::ProfileLadder;
pub use part::ProfiledPart;
pub use solo::{PassRatios, SoloRatios};
pub use table::{ProfileKey, ProfileSample, ProfileTable};
pub(crate) use io::{read_json, write_json};

/// The compute hints of an H200, for the tests of the analytic profile and its files.
#[cfg(test)]
fn h200() -> crate::cluster::ComputeHints {
    crate::cluster::ComputeHints {
        peak_flops: 4.95e14,
        memory_bandwidth_bytes_per_second: 4.8e12,
        efficiency: 0.5,
        kernel_launch_seconds: 5e-6,
    }
}

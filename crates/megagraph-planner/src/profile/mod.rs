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

//! Seeded synthetic graphs: a contextual stochastic block model ([`CsbmConfig`]) for
//! node-classification datasets with a known ground truth, and a Chung-Lu power-law graph
//! ([`PowerLawConfig`]) for scale tests.
//!
//! Both are deterministic functions of their configuration (ChaCha8 seeded from `seed`),
//! independent of the number of threads.

mod csbm;
mod power_law;

pub use csbm::CsbmConfig;
pub use power_law::PowerLawConfig;

use rand::Rng;

/// A standard normal sample (Box-Muller).
pub(crate) fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // u1 in (0, 1] avoids ln(0).
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Checks that `value` is finite and within `[lo, hi]`.
pub(crate) fn check_range(
    field: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
    reason: &'static str,
) -> Result<(), crate::GraphError> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(())
    } else {
        Err(crate::GraphError::InvalidConfig {
            field,
            value: value.to_string(),
            reason,
        })
    }
}

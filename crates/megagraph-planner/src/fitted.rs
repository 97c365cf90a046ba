//! [`FittedProfile`]: a [`ProfileTable`] turned into functions of size, one
//! [`PiecewiseLinear`] per part and metric.
//!
//! Times of the embedding, dense-layer and head parts are fitted against rows `n`; attention times
//! against the pairs `n^2` of a block. Saved and peak bytes are fitted against rows for every part.

use crate::latency::{FitError, FitOptions, PiecewiseLinear};
use crate::profile::{ProfileError, ProfileTable, ProfiledPart};

/// Fitted forward/backward seconds and saved/peak bytes of one part.
#[derive(Clone, Debug, PartialEq)]
pub struct PartFit {
    /// Forward seconds against the part's time measure.
    pub forward: PiecewiseLinear,
    /// Backward seconds against the part's time measure.
    pub backward: PiecewiseLinear,
    /// Saved bytes against rows.
    pub saved: PiecewiseLinear,
    /// Peak bytes against rows.
    pub peak: PiecewiseLinear,
    /// Whether times are fitted against `n^2` (attention) rather than `n`.
    pub time_in_pairs: bool,
}

/// Every part of a profile, fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct FittedProfile {
    /// The embedding stage.
    pub embedding: PartFit,
    /// One layer without its attention core.
    pub layer_dense: PartFit,
    /// One attention block.
    pub attention: PartFit,
    /// The head.
    pub head: PartFit,
}

/// Why a profile part cannot be fitted.
#[derive(Debug, thiserror::Error)]
pub enum FitProfileError {
    /// The table is invalid.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// A metric of a part cannot be fitted.
    #[error("cannot fit {metric} of profile part {part:?}: {source}")]
    Fit {
        /// The part.
        part: ProfiledPart,
        /// `forward_seconds`, `backward_seconds`, `saved_bytes` or `peak_bytes`.
        metric: &'static str,
        /// The fitting error.
        source: FitError,
    },
}

impl PartFit {
    fn measure(&self, n: f64) -> f64 {
        if self.time_in_pairs { n * n } else { n }
    }

    /// Forward seconds at size `n` (rows, or block edge for attention).
    pub fn forward_seconds(&self, n: f64) -> f64 {
        self.forward.eval(self.measure(n))
    }

    /// Backward seconds at size `n`.
    pub fn backward_seconds(&self, n: f64) -> f64 {
        self.backward.eval(self.measure(n))
    }

    /// Forward plus backward seconds at size `n`.
    pub fn step_seconds(&self, n: f64) -> f64 {
        self.forward_seconds(n) + self.backward_seconds(n)
    }

    /// Bytes kept for the backward pass at `n` rows.
    pub fn saved_bytes(&self, n: f64) -> f64 {
        self.saved.eval(n)
    }

    /// Transient bytes beyond the saved ones at `n` rows (peak minus saved, at least 0).
    pub fn workspace_bytes(&self, n: f64) -> f64 {
        (self.peak.eval(n) - self.saved.eval(n)).max(0.0)
    }
}

impl FittedProfile {
    /// Validates `table` and fits every part and metric.
    pub fn fit(table: &ProfileTable, options: &FitOptions) -> Result<Self, FitProfileError> {
        table.validate()?;
        let part = |part: ProfiledPart| -> Result<PartFit, FitProfileError> {
            let samples = table.samples(part);
            let time_in_pairs = part == ProfiledPart::Attention;
            let x = |size: usize| {
                let n = size as f64;
                if time_in_pairs { n * n } else { n }
            };
            let fit = |metric: &'static str, points: Vec<(f64, f64)>| {
                PiecewiseLinear::fit(&points, options).map_err(|source| FitProfileError::Fit {
                    part,
                    metric,
                    source,
                })
            };
            Ok(PartFit {
                forward: fit(
                    "forward_seconds",
                    samples
                        .iter()
                        .map(|s| (x(s.size), s.forward_seconds))
                        .collect(),
                )?,
                backward: fit(
                    "backward_seconds",
                    samples
                        .iter()
                        .map(|s| (x(s.size), s.backward_seconds))
                        .collect(),
                )?,
                saved: fit(
                    "saved_bytes",
                    samples
                        .iter()
                        .map(|s| (s.size as f64, s.saved_bytes as f64))
                        .collect(),
                )?,
                peak: fit(
                    "peak_bytes",
                    samples
                        .iter()
                        .map(|s| (s.size as f64, s.peak_bytes as f64))
                        .collect(),
                )?,
                time_in_pairs,
            })
        };
        Ok(Self {
            embedding: part(ProfiledPart::Embedding)?,
            layer_dense: part(ProfiledPart::LayerDense)?,
            attention: part(ProfiledPart::Attention)?,
            head: part(ProfiledPart::Head)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ComputeHints;
    use crate::profile::{ProfileLadder, analytic_profile};
    use crate::workload::ModelShape;

    #[test]
    fn fits_reproduce_the_samples() {
        let hints = ComputeHints {
            peak_flops: 4.95e14,
            memory_bandwidth_bytes_per_second: 4.8e12,
            efficiency: 0.5,
            kernel_launch_seconds: 5e-6,
        };
        let table = analytic_profile(
            &hints,
            "gpu",
            &ModelShape::paper(),
            4,
            &ProfileLadder::default(),
        )
        .unwrap();
        let fitted = FittedProfile::fit(&table, &FitOptions::default()).unwrap();
        for (fit, samples) in [
            (&fitted.embedding, &table.embedding),
            (&fitted.layer_dense, &table.layer_dense),
            (&fitted.attention, &table.attention),
            (&fitted.head, &table.head),
        ] {
            for sample in samples {
                let n = sample.size as f64;
                let relative = |a: f64, b: f64| (a - b).abs() / b.max(1e-30);
                assert!(
                    relative(fit.forward_seconds(n), sample.forward_seconds) < 0.1,
                    "{sample:?}"
                );
                assert!(
                    relative(fit.backward_seconds(n), sample.backward_seconds) < 0.1,
                    "{sample:?}"
                );
                assert!(
                    relative(fit.saved_bytes(n), sample.saved_bytes as f64) < 1e-6,
                    "{sample:?}"
                );
            }
        }
        // Extrapolating a quadratic in pairs: a block of 2^19 is four times 2^18.
        let a = fitted.attention.forward_seconds((1u64 << 18) as f64);
        let b = fitted.attention.forward_seconds((1u64 << 19) as f64);
        assert!((b / a - 4.0).abs() < 0.1, "{}", b / a);
    }
}

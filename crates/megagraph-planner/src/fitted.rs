//! [`FittedProfile`]: a [`ProfileTable`] turned into functions of size, one
//! [`PiecewiseLinear`] per part and metric.
//!
//! Times of the embedding, dense-layer and head parts are fitted against rows `n`; attention times
//! against the pairs `n^2` of a block, and so are the embedding's with an edge encoding (its
//! sample builds the bias of the sequence's `n^2` pairs). Saved and peak bytes are fitted against
//! rows for every part.

use crate::latency::{FitError, FitOptions, PiecewiseLinear};
use crate::profile::{ProfileError, ProfileSample, ProfileTable, ProfiledPart};
use crate::profile::SoloRatios;

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
    /// Whether times are fitted against `n^2` (attention; the embedding with an edge encoding)
    /// rather than `n`.
    pub time_in_pairs: bool,
}

/// The attention part fitted at every measured batch: `(batch, fit)` by increasing batch, each
/// fit giving the time and bytes of the whole batch.
///
/// The cost of `q` sequences interpolates the per-sequence cost linearly in `q` between the two
/// nearest measured batches and keeps it constant beyond the largest (or below the smallest):
/// on a CPU the attention op's cost per sequence grows with the batch (its tiles leave the
/// caches), so `q` blocks do not cost `q` times one.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchedFit {
    /// Fits by increasing batch.
    pub by_batch: Vec<(usize, PartFit)>,
}

impl BatchedFit {
    /// `q` times the per-sequence value of `metric` at size `n`, interpolated over batches.
    fn total(&self, q: f64, n: f64, metric: impl Fn(&PartFit, f64) -> f64) -> f64 {
        let per_sequence = |(batch, fit): &(usize, PartFit)| metric(fit, n) / *batch as f64;
        let fits = &self.by_batch;
        let Some(first) = fits.first() else {
            return 0.0;
        };
        let position = fits.iter().position(|(batch, _)| *batch as f64 >= q);
        let cost = match position {
            None => per_sequence(&fits[fits.len() - 1]),
            Some(0) => per_sequence(first),
            Some(i) => {
                let (low, high) = (&fits[i - 1], &fits[i]);
                let (b0, b1) = (low.0 as f64, high.0 as f64);
                let t = (q - b0) / (b1 - b0);
                per_sequence(low) * (1.0 - t) + per_sequence(high) * t
            }
        };
        q * cost
    }

    /// Forward seconds of `q` sequences' blocks of edge `n`.
    pub fn forward_seconds(&self, q: f64, n: f64) -> f64 {
        self.total(q, n, PartFit::forward_seconds)
    }

    /// Backward seconds of `q` sequences' blocks of edge `n`.
    pub fn backward_seconds(&self, q: f64, n: f64) -> f64 {
        self.total(q, n, PartFit::backward_seconds)
    }

    /// Saved bytes of `q` sequences' blocks of `n` rows.
    pub fn saved_bytes(&self, q: f64, n: f64) -> f64 {
        self.total(q, n, PartFit::saved_bytes)
    }

    /// Workspace bytes of `q` sequences' blocks of `n` rows.
    pub fn workspace_bytes(&self, q: f64, n: f64) -> f64 {
        self.total(q, n, PartFit::workspace_bytes)
    }
}

/// Every part of a profile, fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct FittedProfile {
    /// The embedding stage.
    pub embedding: PartFit,
    /// One layer without its attention core.
    pub layer_dense: PartFit,
    /// One attention block, per measured batch.
    pub attention: BatchedFit,
    /// The head.
    pub head: PartFit,
    /// The table's [`runtime_overhead_bytes`](ProfileTable::runtime_overhead_bytes).
    pub runtime_overhead_bytes: u64,
    /// The table's [`solo`](ProfileTable::solo) ratios.
    pub solo: Option<SoloRatios>,
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
        let part = |part: ProfiledPart, samples: &[ProfileSample]| -> Result<PartFit, FitProfileError> {
            // with an edge encoding, the embedding's sample of `n` nodes builds the bias of
            // its `n²` pairs, which dominates its time (see `ProfileTable`)
            let time_in_pairs = part == ProfiledPart::Attention
                || (part == ProfiledPart::Embedding && table.key.shape.edge_feature_dim > 0);
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
        let mut by_batch = Vec::new();
        for batch in table.attention_batches() {
            let samples = table.attention_at(batch);
            by_batch.push((batch, part(ProfiledPart::Attention, &samples)?));
        }
        Ok(Self {
            embedding: part(ProfiledPart::Embedding, &table.embedding)?,
            layer_dense: part(ProfiledPart::LayerDense, &table.layer_dense)?,
            attention: BatchedFit { by_batch },
            head: part(ProfiledPart::Head, &table.head)?,
            runtime_overhead_bytes: table.runtime_overhead_bytes,
            solo: table.solo,
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
            (&fitted.attention.by_batch[0].1, &table.attention),
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
        let a = fitted.attention.forward_seconds(1.0, (1u64 << 18) as f64);
        let b = fitted.attention.forward_seconds(1.0, (1u64 << 19) as f64);
        // One measured batch: q sequences cost q times one.
        let four = fitted.attention.forward_seconds(4.0, (1u64 << 18) as f64);
        assert!((four / a - 4.0).abs() < 1e-9);
        assert!((b / a - 4.0).abs() < 0.1, "{}", b / a);
    }

    #[test]
    fn with_an_edge_encoding_the_embedding_time_is_fitted_in_pairs() {
        let hints = ComputeHints {
            peak_flops: 9.6e10,
            memory_bandwidth_bytes_per_second: 1.0e10,
            efficiency: 0.25,
            kernel_launch_seconds: 5e-6,
        };
        let shape = ModelShape {
            edge_feature_dim: 16,
            ..ModelShape::paper()
        };
        let ladder = ProfileLadder {
            rows: vec![128, 256, 512],
            blocks: vec![128, 256, 512],
            ..ProfileLadder::default()
        };
        let mut table = analytic_profile(&hints, "cpu", &shape, 4, &ladder).unwrap();
        // the embedding of benches/table_one.rs as measured on the 2-core machine (seconds):
        // its time grows with the n² pairs of the sequence, not with its n rows
        for (sample, (forward, backward)) in table
            .embedding
            .iter_mut()
            .zip([(2.292e-3, 7.841e-3), (9.147e-3, 32.839e-3), (46.332e-3, 141.378e-3)])
        {
            sample.forward_seconds = forward;
            sample.backward_seconds = backward;
        }
        let fitted = FittedProfile::fit(&table, &FitOptions::default()).unwrap();
        assert!(fitted.embedding.time_in_pairs);
        assert!(!fitted.layer_dense.time_in_pairs && !fitted.head.time_in_pairs);
        let at = |n: f64| fitted.embedding.forward_seconds(n) + fitted.embedding.backward_seconds(n);
        // the largest sample (the size a stage runs at) within 10%; a line in rows would put
        // it at 131 ms, 70% of the measured 187.7 ms
        let measured = 46.332e-3 + 141.378e-3;
        assert!((at(512.0) / measured - 1.0).abs() < 0.1, "{} s", at(512.0));
        // twice the rows, about four times the time
        assert!((at(1024.0) / at(512.0) - 4.0).abs() < 0.4, "{}", at(1024.0) / at(512.0));
        // without an edge encoding the same samples are fitted in rows
        table.key.shape.edge_feature_dim = 0;
        assert!(!FittedProfile::fit(&table, &FitOptions::default()).unwrap().embedding.time_in_pairs);
    }

    #[test]
    fn batched_attention_interpolates_the_cost_per_sequence() {
        let line = |slope: f64| {
            PiecewiseLinear::fit(&[(1.0, slope), (2.0, 2.0 * slope)], &FitOptions::default())
                .unwrap()
        };
        // batch 1 costs 1 per unit; batch 4 costs 8 per unit in all (2 per sequence)
        let fit = |slope| PartFit {
            forward: line(slope),
            backward: line(slope),
            saved: line(slope),
            peak: line(2.0 * slope),
            time_in_pairs: false,
        };
        let batched = BatchedFit {
            by_batch: vec![(1, fit(1.0)), (4, fit(8.0))],
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(batched.forward_seconds(1.0, 1.0), 1.0));
        assert!(close(batched.forward_seconds(4.0, 1.0), 8.0));
        // halfway in batch: 1.5 per sequence
        assert!(close(batched.forward_seconds(2.5, 1.0), 2.5 * 1.5));
        // beyond the largest batch the per-sequence cost stays
        assert!(close(batched.forward_seconds(8.0, 1.0), 16.0));
        assert!(close(batched.workspace_bytes(1.0, 1.0), 1.0));
    }
}

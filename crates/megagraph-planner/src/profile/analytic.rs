//! [`analytic_profile`]: a [`ProfileTable`] estimated from FLOP and byte counts (a roofline per
//! kernel) for devices that cannot be measured here.

use super::error::ProfileError;
use super::ladder::ProfileLadder;
use super::table::{ProfileKey, ProfileSample, ProfileTable};
use crate::cluster::ComputeHints;
use crate::workload::ModelShape;

/// One kernel of the analytic model: its arithmetic and its memory traffic.
#[derive(Clone, Copy)]
struct Kernel {
    flops: f64,
    bytes: f64,
}

impl Kernel {
    /// Roofline time, never below one kernel launch.
    fn seconds(&self, hints: &ComputeHints) -> f64 {
        let compute = self.flops / (hints.peak_flops * hints.efficiency);
        let memory = self.bytes / (hints.memory_bandwidth_bytes_per_second * hints.efficiency);
        compute.max(memory).max(hints.kernel_launch_seconds)
    }
}

/// Estimates a [`ProfileTable`] from FLOP and byte counts (a roofline per kernel, each at least
/// one kernel launch), for devices that cannot be measured here.
///
/// Backward passes are modeled as two kernels per forward kernel (input and weight gradients,
/// or the gradient of an elementwise op), each as costly as the forward kernel; the attention
/// backward recomputes the scores. The key's backend is `analytic`.
pub fn analytic_profile(
    hints: &ComputeHints,
    device: &str,
    shape: &ModelShape,
    dtype_bytes: usize,
    ladder: &ProfileLadder,
) -> Result<ProfileTable, ProfileError> {
    for (which, sizes) in [("rows", &ladder.rows), ("blocks", &ladder.blocks)] {
        let mut distinct = sizes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 || distinct[0] == 0 {
            return Err(ProfileError::BadLadder {
                which,
                sizes: sizes.clone(),
            });
        }
    }
    let model = AnalyticModel {
        hints,
        d: shape.hidden as f64,
        f: shape.ffn_hidden as f64,
        h: shape.heads as f64,
        features: shape.feature_dim as f64,
        classes: shape.num_classes as f64,
        tile: shape.key_tile as f64,
        e: dtype_bytes as f64,
        edge_dim: shape.edge_feature_dim as f64,
        hops: shape.edge_hops() as f64,
    };
    let series =
        |sizes: &[usize], sample: &dyn Fn(f64) -> ([f64; 2], [f64; 2])| -> Vec<ProfileSample> {
            let mut sizes = sizes.to_vec();
            sizes.sort_unstable();
            sizes.dedup();
            sizes
                .into_iter()
                .map(|size| {
                    let ([forward_seconds, backward_seconds], [saved, peak]) = sample(size as f64);
                    ProfileSample {
                        size,
                        forward_seconds,
                        backward_seconds,
                        saved_bytes: saved.ceil() as u64,
                        peak_bytes: peak.ceil() as u64,
                        batch: 1,
                    }
                })
                .collect()
        };
    let table = ProfileTable {
        key: ProfileKey::new("analytic", device, shape, dtype_bytes),
        analytic: true,
        embedding: series(&ladder.rows, &|n| model.embedding(n)),
        layer_dense: series(&ladder.rows, &|n| model.layer_dense(n)),
        attention: series(&ladder.blocks, &|n| model.attention(n)),
        head: series(&ladder.rows, &|n| model.head(n)),
        runtime_overhead_bytes: 0,
        solo: None,
    };
    table.validate()?;
    Ok(table)
}

/// FLOP and byte counts of the parts; `e` is bytes per element.
struct AnalyticModel<'a> {
    hints: &'a ComputeHints,
    d: f64,
    f: f64,
    h: f64,
    features: f64,
    classes: f64,
    tile: f64,
    e: f64,
    /// Width of the edge features (0: no edge encoding).
    edge_dim: f64,
    /// Hops of the edge encoding's paths.
    hops: f64,
}

impl AnalyticModel<'_> {
    /// `([forward, backward] seconds, [saved, peak] bytes)` of a kernel sequence.
    fn times(&self, kernels: &[Kernel]) -> [f64; 2] {
        let forward: f64 = kernels.iter().map(|k| k.seconds(self.hints)).sum();
        [forward, 2.0 * forward]
    }

    /// A matmul `[n, k] x [k, m]`.
    fn matmul(&self, n: f64, k: f64, m: f64) -> Kernel {
        Kernel {
            flops: 2.0 * n * k * m,
            bytes: self.e * (n * k + k * m + n * m),
        }
    }

    /// An elementwise kernel reading `inputs` and writing `outputs` elements.
    fn elementwise(&self, inputs: f64, outputs: f64, flops_per_output: f64) -> Kernel {
        Kernel {
            flops: flops_per_output * outputs,
            bytes: self.e * (inputs + outputs),
        }
    }

    fn embedding(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, e) = (self.d, self.e);
        let (h, hops) = (self.h, self.hops);
        let mut kernels = vec![
            self.matmul(n, self.features, d),
            // Two degree-embedding gathers and the sum: indices (u32) in, rows out.
            Kernel {
                flops: 2.0 * n * d,
                bytes: e * 3.0 * n * d + 8.0 * n,
            },
        ];
        if hops > 0.0 {
            // The edge encoding of one sequence of n nodes: its n edges projected per hop, then
            // per pair the gather of `hops` rows of `heads` (i64 indices in), their sum, the
            // scale by 1 / length and the `[heads, n, n]` bias out.
            kernels.push(self.matmul(n, self.edge_dim, hops * h));
            kernels.push(Kernel {
                flops: n * n * hops * h + n * n * h,
                bytes: e * (n * n * hops * h + 2.0 * n * n * h) + 8.0 * n * n * hops,
            });
        }
        // Features (for the weight gradient), degree indices and the edge paths.
        let paths = 8.0 * n * n * hops + e * n * n * f64::from(hops > 0.0);
        let saved = e * n * self.features + 8.0 * n + paths;
        (self.times(&kernels), [saved, saved + e * 2.0 * n * d + e * n * n * h * f64::from(hops > 0.0)])
    }

    fn layer_dense(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, f, e) = (self.d, self.f, self.e);
        let kernels = [
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, 3.0 * d),
            self.matmul(n, d, d),
            self.elementwise(2.0 * n * d, n * d, 1.0),
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, f),
            self.elementwise(n * f, n * f, 10.0),
            self.matmul(n, f, d),
            self.elementwise(2.0 * n * d, n * d, 1.0),
        ];
        // Layer input, first norm output, attention output, residual, second norm output, FFN
        // pre-activation and activation, and two layer norms' mean and rstd (f32).
        let saved = e * n * (5.0 * d + 2.0 * f) + 16.0 * n;
        // Largest transient: an intermediate and its gradient.
        let transient = e * n * 2.0 * (3.0 * d).max(f);
        (self.times(&kernels), [saved, saved + transient])
    }

    fn attention(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, h, e) = (self.d, self.h, self.e);
        let pairs = n * n;
        let forward = [
            // QK^T, bias gather from the u8 index, online softmax, PV: one fused kernel.
            Kernel {
                flops: 4.0 * pairs * d + 8.0 * pairs * h,
                bytes: pairs + e * 4.0 * n * d + 4.0 * 2.0 * n * h,
            },
            // Merging the block's partial output into the running output.
            self.elementwise(n * (2.0 * d + 4.0 * h), n * (d + 2.0 * h), 4.0),
        ];
        let backward = [
            // Recompute scores, dV, dP; softmax and bias gradients.
            Kernel {
                flops: 6.0 * pairs * d + 12.0 * pairs * h,
                bytes: pairs + e * 6.0 * n * d + 4.0 * n * h,
            },
            // dQ, dK.
            Kernel {
                flops: 4.0 * pairs * d + 4.0 * pairs * h,
                bytes: pairs + e * 6.0 * n * d,
            },
        ];
        let seconds = |ks: &[Kernel]| ks.iter().map(|k| k.seconds(self.hints)).sum::<f64>();
        // Q, K, V of the local rows and the log-sum-exp (f32) per head.
        let saved = e * 3.0 * n * d + 4.0 * n * h;
        // Score and probability tiles, output accumulator and softmax statistics, and in backward
        // the dQ/dK/dV accumulators.
        let workspace =
            e * 2.0 * n * self.tile.min(n) * h + 4.0 * n * (d + 2.0 * h) + e * 3.0 * n * d;
        (
            [seconds(&forward), seconds(&backward)],
            [saved, saved + workspace],
        )
    }

    fn head(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, c, e) = (self.d, self.classes, self.e);
        let kernels = [
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, c),
            self.elementwise(n * c, n * c, 5.0),
        ];
        // Norm output, logits and norm statistics.
        let saved = e * n * (d + c) + 8.0 * n;
        (self.times(&kernels), [saved, saved + e * n * c])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::h200;

    #[test]
    fn analytic_profile_is_valid_and_scales() {
        let shape = ModelShape::paper();
        let table =
            analytic_profile(&h200(), "NVIDIA H200", &shape, 4, &ProfileLadder::default()).unwrap();
        assert_eq!(table.key.backend, "analytic");
        let attention = &table.attention;
        let (small, large) = (
            &attention[attention.len() - 2],
            &attention[attention.len() - 1],
        );
        // Twice the block edge: about four times the work.
        let ratio = large.forward_seconds / small.forward_seconds;
        assert!((3.5..=4.5).contains(&ratio), "{ratio}");
        // Tiny sizes are launch-bound.
        assert!(table.layer_dense[0].forward_seconds >= 9.0 * 5e-6);
        // Saved bytes are linear in rows.
        let dense = &table.layer_dense;
        assert_eq!(dense[1].saved_bytes, 2 * dense[0].saved_bytes);
    }

    #[test]
    fn bad_samples_and_ladders_are_refused() {
        let shape = ModelShape::paper();
        let ladder = ProfileLadder {
            rows: vec![64, 128],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        let mut table = analytic_profile(&h200(), "gpu", &shape, 4, &ladder).unwrap();
        table.head[1].size = 64;
        assert!(matches!(
            table.validate(),
            Err(ProfileError::BadSample {
                part: crate::profile::ProfiledPart::Head,
                index: 1,
                field: "size",
                ..
            })
        ));
        table.head.truncate(1);
        assert!(matches!(
            table.validate(),
            Err(ProfileError::TooFewSamples { count: 1, .. })
        ));
        let bad_ladder = ProfileLadder {
            rows: vec![64, 64],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        assert!(matches!(
            analytic_profile(&h200(), "gpu", &shape, 4, &bad_ladder),
            Err(ProfileError::BadLadder { which: "rows", .. })
        ));
    }
}

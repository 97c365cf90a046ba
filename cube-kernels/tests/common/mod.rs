//! Shared test support: random cases, a float64 dense reference of the op (forward and analytic
//! backward) in plain Rust, conversions to Burn tensors, and the error metric.
//!
//! Error metric: for two arrays `a` (op) and `r` (reference) of the same length, entries where
//! `r` is `-inf` must be `-inf` in `a` as well (they are compared exactly and left out of the
//! norm); over the remaining entries the norm-wise relative error is
//! `‖a − r‖₂ / max(‖r‖₂, 1e-30)`.
//!
//! Sums of many terms that nearly cancel (the table gradient: every pair of a head whose key
//! falls in a bucket adds its logit gradient `p·dP − p·Δ + p·dLSE` to one entry) are measured
//! against the scale of the summed terms instead: `‖a − r‖₂ / max(‖s‖₂, 1e-30)` with `s` the
//! float64 sums of the terms' magnitudes `p·(|dP| + |Δ| + |dLSE|)` (so `|r| ≤ s`). An `f32` sum's
//! rounding error is bounded relative to `s`, not to `|r|`, which can be arbitrarily small (see
//! [`assert_close_to_scale`]).

#![allow(dead_code)]

pub mod tracked;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};
use megagraph_kernels::{AttentionBias, BucketIndex, DistanceBias, SparseBucketIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The wgpu device of the kernel tests: Mesa llvmpipe through OpenGL (no GPU needed), set up
/// once per process.
#[cfg(feature = "wgpu")]
pub fn wgpu_device() -> burn::backend::wgpu::WgpuDevice {
    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, graphics::OpenGl, init_setup};
    static SETUP: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    SETUP.get_or_init(|| {
        init_setup::<OpenGl>(&WgpuDevice::Cpu, RuntimeOptions::default());
    });
    WgpuDevice::Cpu
}

/// The wgpu tests of a process take turns on the device: on OpenGL, wgpu-hal gives up on its
/// adapter context after a second ("Could not lock adapter context"), and two tests autotuning at
/// once can keep it that long. Hold the guard for the whole test.
#[cfg(feature = "wgpu")]
pub fn wgpu_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A seeded generator. The seed comes from `MEGAGRAPH_TEST_SEED` when set (to replay a failure),
/// otherwise from the system generator; it is printed so a failing run shows it.
pub fn seeded_rng(test: &str) -> (ChaCha8Rng, u64) {
    let seed = std::env::var("MEGAGRAPH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    println!("{test}: seed {seed} (replay with MEGAGRAPH_TEST_SEED={seed})");
    (ChaCha8Rng::seed_from_u64(seed), seed)
}

/// Dimensions of a case.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub q_len: usize,
    pub k_len: usize,
    pub head_dim: usize,
    pub buckets: usize,
    /// Last dimension of the distance index.
    pub total_k_len: usize,
    pub column_offset: usize,
}

/// One random case: all tensors as row-major `f32` (what the op sees) plus masks and index.
#[derive(Clone, Debug)]
pub struct Case {
    pub dims: Dims,
    /// `[batch, heads, q_len, head_dim]`
    pub q: Vec<f32>,
    /// `[batch, heads, k_len, head_dim]`
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// `[batch, q_len, total_k_len]`
    pub index: Option<Vec<u8>>,
    /// `[buckets, heads]`
    pub table: Vec<f32>,
    /// `[batch, heads, q_len, k_len]`
    pub dense: Option<Vec<f32>>,
    /// `[batch, k_len]`, true = masked
    pub mask: Option<Vec<bool>>,
    pub scale: f32,
}

/// What a case contains besides q, k, v.
#[derive(Clone, Copy, Debug)]
pub struct Features {
    pub distance: bool,
    pub dense: bool,
    pub mask: bool,
    /// Mask every key of batch element 0 (needs `mask`).
    pub all_masked_batch: bool,
}

pub fn uniform(rng: &mut ChaCha8Rng, n: usize, amplitude: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-amplitude..amplitude))
        .collect()
}

impl Case {
    pub fn random(rng: &mut ChaCha8Rng, dims: Dims, features: Features) -> Self {
        let Dims {
            batch,
            heads,
            q_len,
            k_len,
            head_dim,
            buckets,
            total_k_len,
            ..
        } = dims;
        let q = uniform(rng, batch * heads * q_len * head_dim, 1.5);
        let k = uniform(rng, batch * heads * k_len * head_dim, 1.5);
        let v = uniform(rng, batch * heads * k_len * head_dim, 1.0);
        let index = features.distance.then(|| {
            (0..batch * q_len * total_k_len)
                .map(|_| rng.random_range(0..buckets) as u8)
                .collect()
        });
        let table = uniform(rng, buckets * heads, 2.0);
        let dense = features
            .dense
            .then(|| uniform(rng, batch * heads * q_len * k_len, 1.0));
        let mask = features.mask.then(|| {
            let mut mask: Vec<bool> = (0..batch * k_len).map(|_| rng.random_bool(0.25)).collect();
            if features.all_masked_batch {
                mask[..k_len].iter_mut().for_each(|m| *m = true);
            }
            mask
        });
        Self {
            dims,
            q,
            k,
            v,
            index,
            table,
            dense,
            mask,
            scale: 1.0 / (head_dim as f32).sqrt(),
        }
    }

    fn bias_at(
        &self,
        b: usize,
        h: usize,
        i: usize,
        j: usize,
        table: &[f64],
        dense: Option<&[f64]>,
    ) -> f64 {
        let d = self.dims;
        let mut bias = 0.0;
        if let Some(index) = &self.index {
            let bucket = index[(b * d.q_len + i) * d.total_k_len + d.column_offset + j] as usize;
            bias += table[bucket * d.heads + h];
        }
        if let Some(dense) = dense {
            bias += dense[((b * d.heads + h) * d.q_len + i) * d.k_len + j];
        }
        bias
    }

    fn masked(&self, b: usize, j: usize) -> bool {
        self.mask
            .as_ref()
            .is_some_and(|m| m[b * self.dims.k_len + j])
    }

    /// Whether row `(b, *, i)` has no visible key.
    pub fn row_all_masked(&self, b: usize) -> bool {
        (0..self.dims.k_len).all(|j| self.masked(b, j))
    }

    /// `[batch, heads, q_len]` flags of rows with no visible key.
    pub fn all_masked_rows(&self) -> Vec<bool> {
        let d = self.dims;
        (0..d.batch * d.heads * d.q_len)
            .map(|r| self.row_all_masked(r / (d.heads * d.q_len)))
            .collect()
    }

    /// Float64 inputs.
    pub fn inputs64(&self) -> Inputs64 {
        let f = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        Inputs64 {
            q: f(&self.q),
            k: f(&self.k),
            v: f(&self.v),
            table: f(&self.table),
            dense: self.dense.as_deref().map(f),
        }
    }

    /// Probabilities and logits of row `(b, h, i)` in float64, `None` if no key is visible.
    /// Returns (p[k_len], lse).
    fn row_probs(&self, x: &Inputs64, b: usize, h: usize, i: usize) -> Option<(Vec<f64>, f64)> {
        let d = self.dims;
        let qi = &x.q[((b * d.heads + h) * d.q_len + i) * d.head_dim..][..d.head_dim];
        let logits: Vec<f64> = (0..d.k_len)
            .map(|j| {
                if self.masked(b, j) {
                    return f64::NEG_INFINITY;
                }
                let kj = &x.k[((b * d.heads + h) * d.k_len + j) * d.head_dim..][..d.head_dim];
                let dot: f64 = qi.iter().zip(kj).map(|(a, c)| a * c).sum();
                dot * self.scale as f64 + self.bias_at(b, h, i, j, &x.table, x.dense.as_deref())
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return None;
        }
        let sum: f64 = logits.iter().map(|s| (s - max).exp()).sum();
        let lse = max + sum.ln();
        Some((logits.iter().map(|s| (s - lse).exp()).collect(), lse))
    }

    /// Dense float64 forward: (`out [batch, heads, q_len, head_dim]`, `lse [batch, heads, q_len]`).
    pub fn forward64(&self, x: &Inputs64) -> (Vec<f64>, Vec<f64>) {
        let d = self.dims;
        let mut out = vec![0.0; d.batch * d.heads * d.q_len * d.head_dim];
        let mut lse = vec![f64::NEG_INFINITY; d.batch * d.heads * d.q_len];
        for b in 0..d.batch {
            for h in 0..d.heads {
                for i in 0..d.q_len {
                    let row = (b * d.heads + h) * d.q_len + i;
                    if let Some((p, l)) = self.row_probs(x, b, h, i) {
                        lse[row] = l;
                        for (j, pj) in p.iter().enumerate() {
                            let vj = &x.v[((b * d.heads + h) * d.k_len + j) * d.head_dim..]
                                [..d.head_dim];
                            let out_row = &mut out[row * d.head_dim..][..d.head_dim];
                            for (o, vc) in out_row.iter_mut().zip(vj) {
                                *o += pj * vc;
                            }
                        }
                    }
                }
            }
        }
        (out, lse)
    }

    /// Analytic float64 backward for upstream gradients `d_out` (like `out`) and `d_lse`
    /// (like `lse`): `dS = P∘(dO·vᵀ − rowsum(dO∘O) + dLSE)`.
    #[allow(clippy::needless_range_loop)] // index arithmetic over several arrays at once
    pub fn backward64(&self, x: &Inputs64, d_out: &[f64], d_lse: &[f64]) -> Grads64 {
        let d = self.dims;
        let (out, _) = self.forward64(x);
        let mut g = Grads64 {
            q: vec![0.0; x.q.len()],
            k: vec![0.0; x.k.len()],
            v: vec![0.0; x.v.len()],
            table: vec![0.0; x.table.len()],
            table_scale: vec![0.0; x.table.len()],
            dense: x.dense.as_ref().map(|t| vec![0.0; t.len()]),
        };
        let scale = self.scale as f64;
        for b in 0..d.batch {
            for h in 0..d.heads {
                for i in 0..d.q_len {
                    let row = (b * d.heads + h) * d.q_len + i;
                    let Some((p, _)) = self.row_probs(x, b, h, i) else {
                        continue;
                    };
                    let d_o = &d_out[row * d.head_dim..][..d.head_dim];
                    let o = &out[row * d.head_dim..][..d.head_dim];
                    let delta: f64 = d_o.iter().zip(o).map(|(a, c)| a * c).sum();
                    let qi_at = row * d.head_dim;
                    for (j, &pj) in p.iter().enumerate() {
                        if pj == 0.0 {
                            continue;
                        }
                        let kv = ((b * d.heads + h) * d.k_len + j) * d.head_dim;
                        let d_p: f64 = (0..d.head_dim).map(|c| d_o[c] * x.v[kv + c]).sum();
                        let d_s = pj * (d_p - delta + d_lse[row]);
                        for c in 0..d.head_dim {
                            g.q[qi_at + c] += scale * d_s * x.k[kv + c];
                            g.k[kv + c] += scale * d_s * x.q[qi_at + c];
                            g.v[kv + c] += pj * d_o[c];
                        }
                        if let Some(index) = &self.index {
                            let bucket = index
                                [(b * d.q_len + i) * d.total_k_len + d.column_offset + j]
                                as usize;
                            g.table[bucket * d.heads + h] += d_s;
                            g.table_scale[bucket * d.heads + h] +=
                                pj * (d_p.abs() + delta.abs() + d_lse[row].abs());
                        }
                        if let Some(dense) = &mut g.dense {
                            dense[row * d.k_len + j] += d_s;
                        }
                    }
                }
            }
        }
        g
    }

    /// The bias of this case as Burn tensors, with a dense distance index.
    pub fn bias<B: Backend>(&self, device: &B::Device) -> AttentionBias<B> {
        self.bias_with::<B>(device, false)
    }

    /// The distance index as a sparse index: the last bucket is the far one, every other pair is
    /// stored.
    pub fn sparse_index<B: Backend>(&self, device: &B::Device) -> Option<SparseBucketIndex<B>> {
        let d = self.dims;
        let index = self.index.as_ref()?;
        let far = (d.buckets - 1) as u8;
        Some(
            SparseBucketIndex::from_dense_buckets(index, [d.batch, d.q_len, d.total_k_len], far, device)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// The bias of this case as Burn tensors, with a sparse distance index when `sparse`.
    pub fn bias_with<B: Backend>(&self, device: &B::Device, sparse: bool) -> AttentionBias<B> {
        let d = self.dims;
        let index = |values: &Vec<u8>| -> BucketIndex<B> {
            if sparse {
                BucketIndex::Sparse(self.sparse_index(device).unwrap_or_else(|| unreachable!()))
            } else {
                DistanceBias::<B>::index_from_u8(
                    values.clone(),
                    [d.batch, d.q_len, d.total_k_len],
                    device,
                )
                .unwrap_or_else(|e| panic!("{e}"))
                .into()
            }
        };
        AttentionBias {
            distance: self.index.as_ref().map(|values| DistanceBias {
                index: index(values),
                table: tensor(&self.table, [d.buckets, d.heads], device),
                column_offset: d.column_offset,
            }),
            dense: self
                .dense
                .as_ref()
                .map(|x| tensor(x, [d.batch, d.heads, d.q_len, d.k_len], device)),
            key_padding_mask: self.mask.as_ref().map(|m| {
                Tensor::<B, 2, Bool>::from_data(
                    TensorData::new(m.clone(), [d.batch, d.k_len]),
                    device,
                )
            }),
        }
    }

    pub fn q_shape(&self) -> [usize; 4] {
        let d = self.dims;
        [d.batch, d.heads, d.q_len, d.head_dim]
    }

    pub fn kv_shape(&self) -> [usize; 4] {
        let d = self.dims;
        [d.batch, d.heads, d.k_len, d.head_dim]
    }
}

/// Float64 copies of the differentiable inputs.
#[derive(Clone, Debug)]
pub struct Inputs64 {
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub table: Vec<f64>,
    pub dense: Option<Vec<f64>>,
}

/// Float64 gradients.
#[derive(Clone, Debug)]
pub struct Grads64 {
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub table: Vec<f64>,
    /// Per table entry the sum of the magnitudes of the terms summed into `table`,
    /// `Σ p·(|dP| + |Δ| + |dLSE|)` (the scale of its rounding error, see the module docs); empty
    /// where not computed.
    pub table_scale: Vec<f64>,
    pub dense: Option<Vec<f64>>,
}

/// A float tensor from row-major `f32` values.
pub fn tensor<B: Backend, const D: usize>(
    values: &[f32],
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

/// The values of a float tensor as `f64`.
pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Norm-wise relative error, see the module docs. `Err` describes a `-inf` / NaN disagreement.
pub fn rel_err(actual: &[f64], reference: &[f64]) -> Result<f64, String> {
    if actual.len() != reference.len() {
        return Err(format!(
            "length {} vs reference {}",
            actual.len(),
            reference.len()
        ));
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (n, (&a, &r)) in actual.iter().zip(reference).enumerate() {
        if r == f64::NEG_INFINITY {
            if a != f64::NEG_INFINITY {
                return Err(format!("entry {n}: {a}, reference -inf"));
            }
            continue;
        }
        if !a.is_finite() {
            return Err(format!("entry {n}: {a}, reference {r}"));
        }
        num += (a - r) * (a - r);
        den += r * r;
    }
    Ok(num.sqrt() / den.sqrt().max(1e-30))
}

/// Asserts `rel_err(actual, reference) <= tol`, naming `what` and the seed.
pub fn assert_close(what: &str, actual: &[f64], reference: &[f64], tol: f64, seed: u64) {
    match rel_err(actual, reference) {
        Ok(err) => assert!(
            err <= tol,
            "{what}: relative error {err:.3e} > {tol:.0e} (seed {seed}, replay with MEGAGRAPH_TEST_SEED={seed})"
        ),
        Err(msg) => panic!("{what}: {msg} (seed {seed}, replay with MEGAGRAPH_TEST_SEED={seed})"),
    }
}

/// Norm-wise error of a sum against the scale of its terms, see the module docs: `Err` as
/// [`rel_err`].
pub fn rel_err_to_scale(actual: &[f64], reference: &[f64], scale: &[f64]) -> Result<f64, String> {
    // `rel_err` checks lengths and non-finite entries; its value is rescaled to ‖scale‖₂.
    let err = rel_err(actual, reference)?;
    if scale.len() != reference.len() {
        return Err(format!(
            "scale length {} vs reference {}",
            scale.len(),
            reference.len()
        ));
    }
    let norm = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt();
    Ok(err * norm(reference).max(1e-30) / norm(scale).max(1e-30))
}

/// Asserts `rel_err_to_scale(actual, reference, scale) <= tol`, naming `what` and the seed: for
/// sums of terms that may cancel (the table gradient), `scale` the float64 sums of `|term|`.
pub fn assert_close_to_scale(
    what: &str,
    actual: &[f64],
    reference: &[f64],
    scale: &[f64],
    tol: f64,
    seed: u64,
) {
    match rel_err_to_scale(actual, reference, scale) {
        Ok(err) => assert!(
            err <= tol,
            "{what}: error {err:.3e} relative to the terms' scale > {tol:.0e} (seed {seed}, replay with MEGAGRAPH_TEST_SEED={seed})"
        ),
        Err(msg) => panic!("{what}: {msg} (seed {seed}, replay with MEGAGRAPH_TEST_SEED={seed})"),
    }
}

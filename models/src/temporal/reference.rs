//! Float64 references and random inputs for the temporal modules' tests.

use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::TimeEncode;

/// A xorshift generator seeded from the clock (the seed goes into every failure message).
pub(crate) struct Rng {
    /// The seed, for failure messages.
    pub seed: u64,
    state: u64,
}

impl Rng {
    /// A generator with a fresh seed.
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64);
        Self {
            seed,
            state: seed | 1,
        }
    }

    /// Uniform in `[low, high)`.
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        low + (high - low) * ((self.state >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// `len` values uniform in `[low, high)`.
    pub fn values(&mut self, len: usize, low: f32, high: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform(low, high)).collect()
    }

    /// A tensor of values uniform in `[-1, 1)`, and the values.
    pub fn tensor<B: Backend, const D: usize>(
        &mut self,
        shape: [usize; D],
        device: &B::Device,
    ) -> (Tensor<B, D>, Vec<f64>) {
        let values = self.values(shape.iter().product(), -1.0, 1.0);
        (tensor(values.clone(), shape, device), widen(&values))
    }
}

/// A float tensor of `values`.
pub(crate) fn tensor<B: Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// A bool tensor of `values`.
pub(crate) fn mask<B: Backend, const D: usize>(
    values: Vec<bool>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Bool> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// `f32` values as `f64`.
pub(crate) fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// A tensor's values as `f64`.
pub(crate) fn read<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().iter::<f32>().map(f64::from).collect()
}

/// `x W + b` of `x` `[rows, d_in]` (row-major) with `linear`'s parameters.
pub(crate) fn linear64<B: Backend>(linear: &Linear<B>, x: &[f64]) -> Vec<f64> {
    let [d_in, d_out] = linear.weight.dims();
    let weight = read(linear.weight.val());
    let bias = linear
        .bias
        .as_ref()
        .map_or(vec![0.0; d_out], |b| read(b.val()));
    x.chunks(d_in)
        .flat_map(|row| {
            (0..d_out)
                .map(|o| {
                    bias[o]
                        + row
                            .iter()
                            .enumerate()
                            .map(|(i, v)| v * weight[i * d_out + o])
                            .sum::<f64>()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `cos(Δt·w + b)` per value of `delta_t`, `[len, dim_time]`.
pub(crate) fn time_encode64<B: Backend>(encode: &TimeEncode<B>, delta_t: &[f64]) -> Vec<f64> {
    let (w, b) = (read(encode.frequency.val()), read(encode.phase.val()));
    delta_t
        .iter()
        .flat_map(|&t| w.iter().zip(&b).map(move |(w, b)| (t * w + b).cos()))
        .collect()
}

/// Layer norm over rows of width `dim` (ε = 1e-5, biased variance).
pub(crate) fn layer_norm64<B: Backend>(norm: &LayerNorm<B>, x: &[f64]) -> Vec<f64> {
    let gamma = read(norm.gamma.val());
    let beta = norm
        .beta
        .as_ref()
        .map_or(vec![0.0; gamma.len()], |b| read(b.val()));
    x.chunks(gamma.len())
        .flat_map(|row| {
            let n = row.len() as f64;
            let mean = row.iter().sum::<f64>() / n;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            row.iter()
                .enumerate()
                .map(|(i, v)| (v - mean) / (var + 1e-5).sqrt() * gamma[i] + beta[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Rows of `a` (`[rows, da]`) and `b` (`[rows, db]`) side by side.
pub(crate) fn concat64(a: &[f64], da: usize, b: &[f64], db: usize) -> Vec<f64> {
    a.chunks(da)
        .zip(b.chunks(db))
        .flat_map(|(x, y)| x.iter().chain(y).copied())
        .collect()
}

/// The TGL attention core: `query` `[rows, dim]`, `key`/`value` `[rows, keys, dim]`, padding
/// `[rows, keys]`; LeakyReLU(0.2) logits per head, masked softmax, weighted sum.
pub(crate) fn attend64(
    query: &[f64],
    key: &[f64],
    value: &[f64],
    padding: &[bool],
    keys: usize,
    heads: usize,
) -> Vec<f64> {
    let rows = padding.len() / keys;
    let head_dim = query.len() / rows / heads;
    let logit = |r: usize, j: usize, h: usize| {
        let span = h * head_dim..(h + 1) * head_dim;
        let q = &query[r * heads * head_dim..][span.clone()];
        let k = &key[(r * keys + j) * heads * head_dim..][span];
        let s: f64 = q.iter().zip(k).map(|(a, b)| a * b).sum();
        (!padding[r * keys + j]).then_some(if s > 0.0 { s } else { 0.2 * s })
    };
    weighted_sum64(value, rows, keys, heads, logit)
}

/// Per row and head, the softmax over `keys` of `logit(row, key, head)` (`None` = masked)
/// weighting the rows of `value` `[rows, keys, dim]`; output `[rows, dim]`, heads side by side.
pub(crate) fn weighted_sum64(
    value: &[f64],
    rows: usize,
    keys: usize,
    heads: usize,
    logit: impl Fn(usize, usize, usize) -> Option<f64>,
) -> Vec<f64> {
    let dim = value.len() / rows / keys;
    let head_dim = dim / heads;
    let mut out = vec![0.0; rows * dim];
    for r in 0..rows {
        for h in 0..heads {
            let logits: Vec<Option<f64>> = (0..keys).map(|j| logit(r, j, h)).collect();
            for (j, weight) in softmax64(&logits).into_iter().enumerate() {
                for c in h * head_dim..(h + 1) * head_dim {
                    out[r * dim + c] += weight * value[(r * keys + j) * dim + c];
                }
            }
        }
    }
    out
}

/// Asserts `|got − want| ≤ tol · (1 + |want|)` elementwise and that nothing is NaN.
pub(crate) fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64, seed: u64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths (seed {seed})");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            !g.is_nan() && (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}] = {g} vs {w} (seed {seed})"
        );
    }
}

/// The logistic function.
pub(crate) fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Softmax of the unmasked `logits` (`None` = masked, weight 0); all masked gives all zeros.
pub(crate) fn softmax64(logits: &[Option<f64>]) -> Vec<f64> {
    let max = logits
        .iter()
        .flatten()
        .fold(f64::NEG_INFINITY, |m, &s| m.max(s));
    let total: f64 = logits.iter().flatten().map(|s| (s - max).exp()).sum();
    logits
        .iter()
        .map(|s| s.map_or(0.0, |s| (s - max).exp() / total))
        .collect()
}

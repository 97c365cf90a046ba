//! The op's CubeCL kernels on a CUDA GPU: correctness against the reference implementation on
//! Flex (outputs, log-sum-exp and the gradients of q, k, v and the table), then forward +
//! backward time per size. Prints one JSON object per line, for `scripts/gpu/attention.sh`.
//!
//! ```text
//! cargo run --release -p megagraph-kernels --features cuda --example gpu_attention -- \
//!     [--check-sizes 200,640] [--wide-check 46400] [--sizes 4096,16384,65536] [--head-dims 8,64] \
//!     [--iterations 10] [--budget-seconds 150]
//! ```
//!
//! Inputs are fresh random values (seeded per size); the distance index is a `u8` `[1, N, N]`
//! tensor with 32 buckets and the table `[32, 8]`. The timed step is
//! `graph_attention` forward, `Σ out∘R` backward, and a device sync, after two warm-up steps.
//! `--budget-seconds` bounds the timing: a size whose steps (predicted from the last size at the
//! same head_dim, as N²) would not fit in what is left runs fewer iterations, or is skipped with a
//! `"kind": "skip"` line.
//!
//! `--wide-check N` (0 = off) runs the op on a batch of 2 sequences of N nodes, so that the
//! distance index holds more than 2³² entries (N ≥ 46341), and checks sampled rows of the output,
//! the lse and the gradient of q whose index offsets lie past 2³², and sampled keys' gradients of
//! k and v, against float64 on the host.
//!
//! Throughput counts the matmul FLOPs of FlashAttention's convention: `4·N²·head_dim` per head
//! forward (`Q·Kᵀ`, `P·V`) and 2.5× that backward, so `14·N²·head_dim·heads` per step; the
//! fraction of peak is against the H200's dense FP32 (non-tensor-core) rate, what the `f32`
//! kernels run on ([`H200_FP32_PEAK`]).

use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_cubecl::cubecl::cuda::CudaRuntime;
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, GraphAttentionBackend, graph_attention};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The kernels' backend: plain `CubeBackend` over CUDA (no fusion), so the op runs the kernels.
type Cuda = burn_cubecl::CubeBackend<CudaRuntime, f32, i32, u8>;

const HEADS: usize = 8;
/// H200 SXM dense FP32 peak, FLOP/s (NVIDIA's datasheet: 67 TFLOPS).
const H200_FP32_PEAK: f64 = 67e12;
/// H200 SXM dense BF16 tensor-core peak, FLOP/s (989 TFLOPS), for reference.
const H200_BF16_PEAK: f64 = 989e12;

/// FLOPs of one forward + backward step (FlashAttention's convention, see the module docs).
fn step_flops(n: usize, head_dim: usize) -> f64 {
    14.0 * (n as f64) * (n as f64) * head_dim as f64 * HEADS as f64
}
const BUCKETS: usize = 32;

/// `len` bucket values, uniform over `0..BUCKETS` (a power of two).
fn random_index(rng: &mut ChaCha8Rng, len: usize) -> Vec<u8> {
    let mut index = vec![0u8; len];
    rng.fill_bytes(&mut index);
    index.iter_mut().for_each(|b| *b &= (BUCKETS - 1) as u8);
    index
}

/// Host copies of one problem: `batch` sequences of `n` nodes.
struct Problem {
    batch: usize,
    n: usize,
    head_dim: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    r: Vec<f32>,
    index: Vec<u8>,
    table: Vec<f32>,
}

impl Problem {
    fn random(n: usize, head_dim: usize) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64((n * 1000 + head_dim) as u64);
        let len = HEADS * n * head_dim;
        let mut floats = |count: usize| -> Vec<f32> { (0..count).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let (q, k, v, r, table) = (floats(len), floats(len), floats(len), floats(len), floats(BUCKETS * HEADS));
        let index = random_index(&mut rng, n * n);
        Self {
            batch: 1,
            n,
            head_dim,
            q,
            k,
            v,
            r,
            index,
            table,
        }
    }

    /// Output, lse and the gradients of q, k, v and the table on the autodiff backend `A`.
    fn run<A: GraphAttentionBackend + AutodiffBackend>(&self, device: &A::Device) -> [Vec<f32>; 6] {
        let shape = [self.batch, HEADS, self.n, self.head_dim];
        let leaf = |values: &[f32]| Tensor::<A, 4>::from_data(TensorData::new(values.to_vec(), shape), device).require_grad();
        let (q, k, v) = (leaf(&self.q), leaf(&self.k), leaf(&self.v));
        let table = Tensor::<A, 2>::from_data(TensorData::new(self.table.clone(), [BUCKETS, HEADS]), device).require_grad();
        let index = DistanceBias::<A>::index_from_u8(self.index.clone(), [self.batch, self.n, self.n], device)
            .unwrap_or_else(|e| panic!("{e}"));
        let bias = AttentionBias {
            distance: Some(DistanceBias {
                index: index.into(),
                table: table.clone(),
                column_offset: 0,
            }),
            dense: None,
            key_padding_mask: None,
        };
        let result = graph_attention(q.clone(), k.clone(), v.clone(), bias, &AttentionOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let r = Tensor::<A, 4>::from_data(TensorData::new(self.r.clone(), shape), device);
        let loss = (result.output.clone() * r).sum() + result.lse.clone().sum();
        let grads = loss.backward();
        let host = |t: Option<Tensor<A::InnerBackend, 4>>| t.map(|t| t.into_data().iter::<f32>().collect()).unwrap_or_default();
        [
            result.output.into_data().iter::<f32>().collect(),
            result.lse.into_data().iter::<f32>().collect(),
            host(q.grad(&grads)),
            host(k.grad(&grads)),
            host(v.grad(&grads)),
            table.grad(&grads).map(|t| t.into_data().iter::<f32>().collect()).unwrap_or_default(),
        ]
    }

    /// Seconds of one forward + backward on `A`, median over `iterations` after two warm-ups.
    fn time<A: GraphAttentionBackend + AutodiffBackend>(&self, device: &A::Device, iterations: usize) -> Vec<f64> {
        let shape = [self.batch, HEADS, self.n, self.head_dim];
        let inner = |values: &[f32]| Tensor::<A::InnerBackend, 4>::from_data(TensorData::new(values.to_vec(), shape), device);
        let (q, k, v, r) = (inner(&self.q), inner(&self.k), inner(&self.v), inner(&self.r));
        let table = Tensor::<A::InnerBackend, 2>::from_data(TensorData::new(self.table.clone(), [BUCKETS, HEADS]), device);
        let index = DistanceBias::<A>::index_from_u8(self.index.clone(), [self.batch, self.n, self.n], device)
            .unwrap_or_else(|e| panic!("{e}"));
        let step = || {
            let [q, k, v] = [&q, &k, &v].map(|t| Tensor::<A, 4>::from_inner(t.clone()).require_grad());
            let table = Tensor::<A, 2>::from_inner(table.clone()).require_grad();
            let bias = AttentionBias {
                distance: Some(DistanceBias {
                    index: index.clone().into(),
                    table,
                    column_offset: 0,
                }),
                dense: None,
                key_padding_mask: None,
            };
            let result = graph_attention(q, k, v, bias, &AttentionOptions::default()).unwrap_or_else(|e| panic!("{e}"));
            let loss = (result.output * Tensor::from_inner(r.clone())).sum();
            drop(loss.backward());
            A::sync(device).unwrap_or_else(|e| panic!("device sync: {e:?}"));
        };
        for _ in 0..2 {
            step();
        }
        (0..iterations)
            .map(|_| {
                let started = Instant::now();
                step();
                started.elapsed().as_secs_f64()
            })
            .collect()
    }
}

/// Rows and keys of the wide check, in the last sequence of its batch of 2.
const WIDE_SAMPLES: usize = 12;

/// The op on `[2, HEADS, n, head_dim]` inputs with an index of `2·n²` entries (past 2³² for
/// `n ≥ 46341`), forward + backward of `Σ out∘R + Σ lse` on the backend `A` (CUDA here); sampled rows of the output,
/// the lse and dq whose index entries lie past 2³² (the last rows of the second sequence), and
/// sampled keys' dk and dv, against float64 on the host. Returns the worst relative error.
fn wide_check<A: GraphAttentionBackend + AutodiffBackend>(n: usize, head_dim: usize, device: &A::Device) -> f64 {
    let batch = 2;
    let mut rng = ChaCha8Rng::seed_from_u64(0x2_0000_0000 + n as u64);
    let len = batch * HEADS * n * head_dim;
    let mut floats = |count: usize| -> Vec<f32> { (0..count).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (q, k, v, r, table) = (floats(len), floats(len), floats(len), floats(len), floats(BUCKETS * HEADS));
    let index = random_index(&mut ChaCha8Rng::seed_from_u64(n as u64), batch * n * n);
    let problem = Problem {
        batch,
        n,
        head_dim,
        q,
        k,
        v,
        r,
        index,
        table,
    };
    let started = Instant::now();
    let [out, lse, dq, dk, dv, _] = problem.run::<A>(device);
    let gpu_seconds = started.elapsed().as_secs_f64();
    let Problem { q, k, v, r, index, table, .. } = problem;

    let scale = 1.0 / (head_dim as f64).sqrt();
    let b = batch - 1;
    let row = |t: &[f32], h: usize, i: usize| -> Vec<f64> {
        let at = ((b * HEADS + h) * n + i) * head_dim;
        t[at..at + head_dim].iter().map(|&x| f64::from(x)).collect()
    };
    let dot = |a: &[f64], c: &[f64]| a.iter().zip(c).map(|(x, y)| x * y).sum::<f64>();
    let bucket = |i: usize, j: usize| index[(b * n + i) * n + j] as usize;
    let logit = |h: usize, i: usize, j: usize, qi: &[f64]| scale * dot(qi, &row(&k, h, j)) + f64::from(table[bucket(i, j) * HEADS + h]);
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    let mut compare = |got: &[f64], want: &[f64]| {
        for (g, w) in got.iter().zip(want) {
            diff += (g - w).powi(2);
            norm += w.powi(2);
        }
    };
    let past = (1u64 << 32).saturating_sub((b * n * n) as u64).div_ceil(n as u64) as usize;
    for s in 0..WIDE_SAMPLES {
        let (h, i) = (s % HEADS, n - 1 - s * (n - past.min(n - 1)) / WIDE_SAMPLES);
        let qi = row(&q, h, i);
        let logits: Vec<f64> = (0..n).map(|j| logit(h, i, j, &qi)).collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        let want_lse = max + sum.ln();
        let mut want_out = vec![0.0; head_dim];
        for (j, l) in logits.iter().enumerate() {
            let p = (l - want_lse).exp();
            row(&v, h, j).iter().zip(want_out.iter_mut()).for_each(|(x, o)| *o += p * x);
        }
        let ri = row(&r, h, i);
        let d = dot(&ri, &want_out);
        let mut want_dq = vec![0.0; head_dim];
        for (j, l) in logits.iter().enumerate() {
            let p = (l - want_lse).exp();
            let ds = p * (dot(&ri, &row(&v, h, j)) - d + 1.0);
            row(&k, h, j).iter().zip(want_dq.iter_mut()).for_each(|(x, o)| *o += scale * ds * x);
        }
        compare(&row(&out, h, i), &want_out);
        compare(&[f64::from(lse[(b * HEADS + h) * n + i])], &[want_lse]);
        compare(&row(&dq, h, i), &want_dq);
    }
    // keys: every query's probability from the GPU's lse and D (checked at the rows above)
    for s in 0..WIDE_SAMPLES {
        let (h, j) = (s % HEADS, (s * 7919 + n / 3) % n);
        let (kj, vj) = (row(&k, h, j), row(&v, h, j));
        let (mut want_dk, mut want_dv) = (vec![0.0; head_dim], vec![0.0; head_dim]);
        for i in 0..n {
            let qi = row(&q, h, i);
            let ri = row(&r, h, i);
            let l = scale * dot(&qi, &kj) + f64::from(table[bucket(i, j) * HEADS + h]);
            let p = (l - f64::from(lse[(b * HEADS + h) * n + i])).exp();
            let d = dot(&ri, &row(&out, h, i));
            let ds = p * (dot(&ri, &vj) - d + 1.0);
            want_dv.iter_mut().zip(&ri).for_each(|(o, x)| *o += p * x);
            want_dk.iter_mut().zip(&qi).for_each(|(o, x)| *o += scale * ds * x);
        }
        compare(&row(&dk, h, j), &want_dk);
        compare(&row(&dv, h, j), &want_dv);
    }
    let error = diff.sqrt() / norm.sqrt().max(1e-30);
    println!(
        "{{\"kind\": \"wide_check\", \"batch\": {batch}, \"n\": {n}, \"heads\": {HEADS}, \"head_dim\": {head_dim}, \
         \"index_entries\": {}, \"first_row_past_2_32\": {past}, \"samples\": {WIDE_SAMPLES}, \"relative_error\": {error:.3e}, \
         \"gpu_seconds\": {gpu_seconds:.2}}}",
        batch * n * n
    );
    error
}

/// Norm-wise relative error `‖a − b‖ / max(‖b‖, tiny)`, ignoring positions where `b` is not finite.
fn relative_error(a: &[f32], b: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        if y.is_finite() {
            diff += (f64::from(x) - f64::from(y)).powi(2);
            norm += f64::from(y).powi(2);
        }
    }
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    diff.sqrt() / norm.sqrt().max(1e-30)
}

fn list(args: &[String], flag: &str, default: &[usize]) -> Vec<usize> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let check_sizes = list(&args, "--check-sizes", &[200, 640]);
    let wide = list(&args, "--wide-check", &[46400]).first().copied().unwrap_or(0);
    let sizes = list(&args, "--sizes", &[4096, 16384, 65536]);
    let head_dims = list(&args, "--head-dims", &[8, 64]);
    let iterations = list(&args, "--iterations", &[10]).first().copied().unwrap_or(10).max(1);
    let budget = list(&args, "--budget-seconds", &[usize::MAX]).first().copied().unwrap_or(usize::MAX) as f64;
    let device = Default::default();

    let names = ["output", "lse", "grad_q", "grad_k", "grad_v", "grad_table"];
    let mut worst = 0.0f64;
    for &n in &check_sizes {
        for &head_dim in &head_dims {
            let problem = Problem::random(n, head_dim);
            let gpu = problem.run::<Autodiff<Cuda>>(&device);
            let reference = problem.run::<Autodiff<Flex>>(&Default::default());
            let errors: Vec<String> = names
                .iter()
                .zip(gpu.iter().zip(&reference))
                .map(|(name, (a, b))| {
                    let error = relative_error(a, b);
                    worst = worst.max(error);
                    format!("\"{name}\": {error:.3e}")
                })
                .collect();
            println!(
                "{{\"kind\": \"check\", \"n\": {n}, \"heads\": {HEADS}, \"head_dim\": {head_dim}, {}}}",
                errors.join(", ")
            );
        }
    }
    if wide > 0 {
        worst = worst.max(wide_check::<Autodiff<Cuda>>(wide, head_dims.first().copied().unwrap_or(8), &device));
    }
    println!("{{\"kind\": \"check_summary\", \"worst_relative_error\": {worst:.3e}, \"pass\": {}}}", worst <= 1e-4);

    let started = Instant::now();
    // seconds of one step at (n, head_dim) last measured, per head_dim
    let mut last: Vec<Option<(usize, f64)>> = vec![None; head_dims.len()];
    for &n in &sizes {
        for (d, &head_dim) in head_dims.iter().enumerate() {
            let left = budget - started.elapsed().as_secs_f64();
            let predicted = last[d].map(|(m, seconds)| seconds * (n as f64 / m as f64).powi(2));
            // two warm-ups plus the timed steps, and the first step's compilation on top
            let runs = match predicted {
                Some(step) => ((left / step).floor() as usize).saturating_sub(3).min(iterations),
                None => iterations,
            };
            if runs == 0 {
                println!(
                    "{{\"kind\": \"skip\", \"impl\": \"megagraph-cubecl\", \"n\": {n}, \"head_dim\": {head_dim}, \
                     \"reason\": \"predicted {:.1} s per step, {left:.0} s of the budget left\"}}",
                    predicted.unwrap_or(f64::NAN)
                );
                continue;
            }
            let problem = Problem::random(n, head_dim);
            let seconds = median(problem.time::<Autodiff<Cuda>>(&device, runs));
            last[d] = Some((n, seconds));
            let flops = step_flops(n, head_dim) / seconds;
            println!(
                "{{\"kind\": \"time\", \"impl\": \"megagraph-cubecl\", \"n\": {n}, \"heads\": {HEADS}, \"head_dim\": {head_dim}, \
                 \"median_seconds\": {seconds:.6e}, \"iterations\": {runs}, \"tflops\": {:.3}, \
                 \"fraction_of_fp32_peak\": {:.4}, \"fraction_of_bf16_peak\": {:.5}}}",
                flops / 1e12,
                flops / H200_FP32_PEAK,
                flops / H200_BF16_PEAK,
            );
        }
    }
    if worst > 1e-4 {
        std::process::exit(1);
    }
}

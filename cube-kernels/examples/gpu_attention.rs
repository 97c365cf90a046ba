//! The op's CubeCL kernels on a CUDA GPU: correctness against the reference implementation on
//! Flex (outputs, log-sum-exp and the gradients of q, k, v and the table), then forward +
//! backward time per size. Prints one JSON object per line, for `scripts/gpu/attention.sh`.
//!
//! ```text
//! cargo run --release -p megagraph-kernels --features cuda --example gpu_attention -- \
//!     [--check-sizes 200,640] [--sizes 4096,16384,65536] [--head-dims 8,64] [--iterations 10]
//! ```
//!
//! Inputs are fresh random values (seeded per size); the distance index is a `u8` `[1, N, N]`
//! tensor with 32 buckets and the table `[32, 8]`. The timed step is
//! `graph_attention` forward, `Σ out∘R` backward, and a device sync, after two warm-up steps.
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
use rand::{Rng, SeedableRng};
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

/// Host copies of one problem.
struct Problem {
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
        let index = (0..n * n).map(|_| rng.random_range(0..BUCKETS as u8)).collect();
        Self {
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
    fn run<A: GraphAttentionBackend + AutodiffBackend>(&self, device: &A::Device) -> Vec<Vec<f32>> {
        let shape = [1, HEADS, self.n, self.head_dim];
        let leaf = |values: &[f32]| Tensor::<A, 4>::from_data(TensorData::new(values.to_vec(), shape), device).require_grad();
        let (q, k, v) = (leaf(&self.q), leaf(&self.k), leaf(&self.v));
        let table = Tensor::<A, 2>::from_data(TensorData::new(self.table.clone(), [BUCKETS, HEADS]), device).require_grad();
        let index = DistanceBias::<A>::index_from_u8(self.index.clone(), [1, self.n, self.n], device)
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
        vec![
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
        let shape = [1, HEADS, self.n, self.head_dim];
        let inner = |values: &[f32]| Tensor::<A::InnerBackend, 4>::from_data(TensorData::new(values.to_vec(), shape), device);
        let (q, k, v, r) = (inner(&self.q), inner(&self.k), inner(&self.v), inner(&self.r));
        let table = Tensor::<A::InnerBackend, 2>::from_data(TensorData::new(self.table.clone(), [BUCKETS, HEADS]), device);
        let index = DistanceBias::<A>::index_from_u8(self.index.clone(), [1, self.n, self.n], device)
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
    let sizes = list(&args, "--sizes", &[4096, 16384, 65536]);
    let head_dims = list(&args, "--head-dims", &[8, 64]);
    let iterations = list(&args, "--iterations", &[10]).first().copied().unwrap_or(10).max(1);
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
    println!("{{\"kind\": \"check_summary\", \"worst_relative_error\": {worst:.3e}, \"pass\": {}}}", worst <= 1e-4);

    for &n in &sizes {
        for &head_dim in &head_dims {
            let problem = Problem::random(n, head_dim);
            let seconds = median(problem.time::<Autodiff<Cuda>>(&device, iterations));
            let flops = step_flops(n, head_dim) / seconds;
            println!(
                "{{\"kind\": \"time\", \"impl\": \"megagraph-cubecl\", \"n\": {n}, \"heads\": {HEADS}, \"head_dim\": {head_dim}, \
                 \"median_seconds\": {seconds:.6e}, \"iterations\": {iterations}, \"tflops\": {:.3}, \
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

//! Forward + backward time of the op on Flex: the fused CPU path (what `Flex` and
//! `Autodiff<Flex>` run) against the reference implementation with Burn tensor ops
//! (`megagraph_kernels::reference`), at the primitive level, on the same inputs.
//!
//! `batch = 1`, `heads = 8`, `head_dim = 8`, a distance index over `[1, N, N]` with 6 buckets
//! (max distance 4) of which 90% of the pairs are in the "farther" one, as in a graph, the default
//! key tile (128). The fused path runs with the index dense (`u8`) and sparse (CSR); the
//! reference with it dense. Run with
//! `cargo bench --bench fused_cpu`; `MEGAGRAPH_BENCH_SIZES=1024,2708`
//! overrides the sizes (default 1024,2708,4096). After criterion's report it prints one table of
//! median times and the ratio reference / fused, measured in the same run.

use std::time::{Duration, Instant};

use burn::backend::Flex;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, SamplingMode};
use megagraph_kernels::{
    BucketIndex, DistanceBias, DistanceBiasPrimitive, GraphAttentionBackend,
    GraphAttentionInputs, SparseBucketIndex, reference,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const HEADS: usize = 8;
const HEAD_DIM: usize = 8;
const BUCKETS: usize = 6;

/// Random inputs of size `n` (with a sparse index when `sparse`) and an upstream gradient of the
/// packed result.
fn inputs(n: usize, sparse: bool) -> (GraphAttentionInputs<Flex>, FloatTensor<Flex>) {
    let device = Default::default();
    let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
    let mut float = |shape: [usize; 4]| {
        let values: Vec<f32> = (0..shape.iter().product())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Tensor::<Flex, 4>::from_data(TensorData::new(values, shape), &device)
            .into_primitive()
            .tensor()
    };
    let shape = [1, HEADS, n, HEAD_DIM];
    let (q, k, v) = (float(shape), float(shape), float(shape));
    let grad = float([1, HEADS, n, HEAD_DIM + 1]);
    let far = BUCKETS as u8 - 1;
    let buckets: Vec<u8> = (0..n * n)
        .map(|_| {
            if rng.random_bool(0.9) {
                far
            } else {
                rng.random_range(0..far)
            }
        })
        .collect();
    let index: BucketIndex<Flex> = if sparse {
        SparseBucketIndex::from_dense_buckets(&buckets, [1, n, n], far, &device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into()
    } else {
        DistanceBias::<Flex>::index_from_u8(buckets, [1, n, n], &device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into()
    };
    let table: Vec<f32> = (0..BUCKETS * HEADS)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let table = Tensor::<Flex, 2>::from_data(TensorData::new(table, [BUCKETS, HEADS]), &device);
    let inputs = GraphAttentionInputs {
        q,
        k,
        v,
        distance: Some(DistanceBiasPrimitive {
            index: index.into_primitive(),
            table: table.into_primitive().tensor(),
            column_offset: 0,
        }),
        dense: None,
        key_padding_mask: None,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        block_size: 128,
    };
    (inputs, grad)
}

/// One forward + backward of the fused path.
fn fused(x: &(GraphAttentionInputs<Flex>, FloatTensor<Flex>)) {
    let packed = Flex::graph_attention_forward(x.0.clone());
    let grads = Flex::graph_attention_backward(x.0.clone(), packed, x.1.clone());
    std::hint::black_box(grads);
}

/// One forward + backward of the reference implementation.
fn reference_step(x: &(GraphAttentionInputs<Flex>, FloatTensor<Flex>)) {
    let packed = reference::forward(x.0.clone());
    let grads = reference::backward(x.0.clone(), packed, x.1.clone());
    std::hint::black_box(grads);
}

/// A benchmarked variant: its name, whether its index is sparse, and one forward + backward.
type Variant = (
    &'static str,
    bool,
    fn(&(GraphAttentionInputs<Flex>, FloatTensor<Flex>)),
);

const VARIANTS: [Variant; 3] = [
    ("fused", false, fused),
    ("fused-sparse", true, fused),
    ("reference", false, reference_step),
];

fn sizes() -> Vec<usize> {
    std::env::var("MEGAGRAPH_BENCH_SIZES")
        .ok()
        .and_then(|s| s.split(',').map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 2708, 4096])
}

/// Median of `runs` timed calls of `f`.
fn median_seconds(runs: usize, f: impl Fn()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let sizes = sizes();
    {
        let mut group = criterion.benchmark_group("fused_cpu");
        group.sampling_mode(SamplingMode::Flat);
        for &n in &sizes {
            for (name, sparse, step) in VARIANTS {
                let x = inputs(n, sparse);
                group.bench_with_input(BenchmarkId::new(name, n), &x, |bench, x| {
                    bench.iter(|| step(x))
                });
            }
        }
        group.finish();
    }
    criterion.final_summary();

    println!("\nforward + backward, batch 1, {HEADS} heads, head_dim {HEAD_DIM}, 10% near pairs");
    println!(
        "{:>6} {:>12} {:>19} {:>14} {:>17}",
        "N", "fused (ms)", "fused-sparse (ms)", "reference (ms)", "reference/fused"
    );
    for &n in &sizes {
        let xs: Vec<_> = VARIANTS
            .iter()
            .map(|&(_, sparse, _)| inputs(n, sparse))
            .collect();
        // interleaved so that a change of machine speed affects all alike
        let mut times = vec![Vec::new(); VARIANTS.len()];
        for _ in 0..5 {
            for (v, &(_, _, step)) in VARIANTS.iter().enumerate() {
                times[v].push(median_seconds(1, || step(&xs[v])));
            }
        }
        let median: Vec<f64> = times
            .iter_mut()
            .map(|t| {
                t.sort_by(f64::total_cmp);
                t[2]
            })
            .collect();
        println!(
            "{n:>6} {:>12.2} {:>19.2} {:>14.2} {:>16.2}x",
            median[0] * 1e3,
            median[1] * 1e3,
            median[2] * 1e3,
            median[2] / median[0]
        );
    }
}

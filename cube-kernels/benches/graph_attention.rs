//! Forward + backward time and peak memory of the blockwise op against attention with the
//! spatial bias materialized as a dense `[batch, heads, N, N]` tensor and plain Burn ops.
//!
//! Both variants run on `Autodiff<Flex>` with `batch = 1`, `heads = 8`, `head_dim = 8`, a `u8`
//! distance index `[1, N, N]` and a learned table `[32, 8]`, and compute the gradients of
//! `Σ out∘R` with respect to q, k, v and the table. The dense variant gathers the table into the
//! bias tensor (inside the timed region: that is its cost of using the table), adds it to the
//! scaled scores and applies `softmax`.
//!
//! Peak memory is the peak of live heap bytes (a counting global allocator) during one
//! forward + backward, above what was live before it (inputs excluded, identical for both).
//!
//! `cargo bench -p megagraph-kernels --bench graph_attention`; `MEGAGRAPH_BENCH_SIZES=512,1024`
//! overrides the sizes (default 1024,2048,4096). Prints a table after criterion's report.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex};
use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, SamplingMode};
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, graph_attention};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Global allocator that counts live bytes and their peak.
struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call forwards to `System` unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Peak live bytes above the starting level while `f` runs.
fn peak_bytes_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

type B = Autodiff<Flex>;

const HEADS: usize = 8;
const HEAD_DIM: usize = 8;
const BUCKETS: usize = 32;
/// N of the problems unless `MEGAGRAPH_BENCH_SIZES` says otherwise.
const DEFAULT_SIZES: [usize; 3] = [1024, 2048, 4096];

/// Inputs of one size, as inner (non-autodiff) tensors.
struct Inputs {
    n: usize,
    q: Tensor<Flex, 4>,
    k: Tensor<Flex, 4>,
    v: Tensor<Flex, 4>,
    r: Tensor<Flex, 4>,
    index: Tensor<Flex, 3, Int>,
    table: Tensor<Flex, 2>,
}

impl Inputs {
    fn new(n: usize) -> Self {
        let device = Default::default();
        let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
        let mut float = |shape: [usize; 4]| {
            let values: Vec<f32> = (0..shape.iter().product())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            Tensor::<Flex, 4>::from_data(TensorData::new(values, shape), &device)
        };
        let shape = [1, HEADS, n, HEAD_DIM];
        let (q, k, v, r) = (float(shape), float(shape), float(shape), float(shape));
        let buckets: Vec<u8> = (0..n * n)
            .map(|_| rng.random_range(0..BUCKETS as u8))
            .collect();
        let index = DistanceBias::<Flex>::index_from_u8(buckets, [1, n, n], &device)
            .unwrap_or_else(|e| panic!("{e}"));
        let table: Vec<f32> = (0..BUCKETS * HEADS)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let table = Tensor::from_data(TensorData::new(table, [BUCKETS, HEADS]), &device);
        Self {
            n,
            q,
            k,
            v,
            r,
            index,
            table,
        }
    }

    fn leaves(&self) -> [Tensor<B, 4>; 3] {
        [&self.q, &self.k, &self.v].map(|t| Tensor::from_inner(t.clone()).require_grad())
    }
}

/// The blockwise op: forward + backward.
fn blockwise_step(x: &Inputs) {
    let [q, k, v] = x.leaves();
    let table = Tensor::<B, 2>::from_inner(x.table.clone()).require_grad();
    let bias = AttentionBias {
        distance: Some(DistanceBias {
            index: Tensor::<B, 3, Int>::from_inner(x.index.clone()).into(),
            table: table.clone(),
            column_offset: 0,
        }),
        ..Default::default()
    };
    let result = graph_attention(
        q.clone(),
        k.clone(),
        v.clone(),
        bias,
        &AttentionOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let grads = (result.output * Tensor::from_inner(x.r.clone()))
        .sum()
        .backward();
    assert!(q.grad(&grads).is_some() && table.grad(&grads).is_some());
}

/// Dense baseline: materialized `[1, heads, N, N]` bias, `softmax`, forward + backward.
fn dense_step(x: &Inputs) {
    let n = x.n;
    let [q, k, v] = x.leaves();
    let table = Tensor::<B, 2>::from_inner(x.table.clone()).require_grad();
    let index = Tensor::<B, 3, Int>::from_inner(x.index.clone()).reshape([n * n]);
    let bias = table
        .clone()
        .transpose()
        .select(1, index)
        .reshape([1, HEADS, n, n]);
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let scores = q
        .clone()
        .matmul(k.clone().swap_dims(2, 3))
        .mul_scalar(scale)
        + bias;
    let out = softmax(scores, 3).matmul(v.clone());
    let grads = (out * Tensor::from_inner(x.r.clone())).sum().backward();
    assert!(q.grad(&grads).is_some() && table.grad(&grads).is_some());
}

/// A benchmarked variant: its name and one forward + backward.
type Variant = (&'static str, fn(&Inputs));

/// Per-iteration times recorded by criterion's runs, by (variant, N).
static TIMES: Mutex<BTreeMap<(&'static str, usize), Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(variant: &'static str, n: usize, per_iter: Duration) {
    if let Ok(mut times) = TIMES.lock() {
        times
            .entry((variant, n))
            .or_default()
            .push(per_iter.as_secs_f64());
    }
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let variants: [Variant; 2] = [("blockwise", blockwise_step), ("dense", dense_step)];
    let mut peaks = BTreeMap::new();
    {
        let mut group = criterion.benchmark_group("graph_attention_fwd_bwd");
        group.sampling_mode(SamplingMode::Flat);
        for n in common::sizes(&DEFAULT_SIZES) {
            let inputs = Inputs::new(n);
            for (name, step) in variants {
                peaks.insert((name, n), peak_bytes_during(|| step(&inputs)));
                group.bench_with_input(BenchmarkId::new(name, n), &inputs, |b, x| {
                    b.iter_custom(|iters| {
                        let start = Instant::now();
                        for _ in 0..iters {
                            step(x);
                        }
                        let elapsed = start.elapsed();
                        record(name, n, elapsed / iters.max(1) as u32);
                        elapsed
                    })
                });
            }
        }
        group.finish();
    }
    criterion.final_summary();

    let times = TIMES.lock().map(|t| t.clone()).unwrap_or_default();
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!();
    println!(
        "forward+backward, Autodiff<Flex>, B=1 H={HEADS} Dh={HEAD_DIM}, block 128; times = median per iteration over criterion's runs"
    );
    println!(
        "| {:>5} | {:>12} | {:>12} | {:>10} | {:>14} | {:>14} | {:>11} |",
        "N", "blockwise s", "dense s", "time ratio", "blockwise MiB", "dense MiB", "peak ratio"
    );
    println!(
        "|------:|-------------:|-------------:|-----------:|---------------:|---------------:|------------:|"
    );
    for n in common::sizes(&DEFAULT_SIZES) {
        let t = |v: &'static str| times.get(&(v, n)).and_then(|x| median(x));
        let p = |v: &'static str| peaks.get(&(v, n)).copied();
        if let (Some(tb), Some(td), Some(pb), Some(pd)) =
            (t("blockwise"), t("dense"), p("blockwise"), p("dense"))
        {
            println!(
                "| {n:>5} | {tb:>12.4} | {td:>12.4} | {:>10.3} | {:>14.1} | {:>14.1} | {:>11.4} |",
                tb / td,
                mib(pb),
                mib(pd),
                pb as f64 / pd as f64
            );
        }
    }
}

//! Dropout on a wide-feature input: Burn's `Dropout` (Bernoulli floats from one ChaCha stream,
//! one element at a time) against megagraph's `FastDropout` (a bool mask from Philox4x32-10,
//! filled on every core), both on `Autodiff<Flex>` while training, over a `[4096, 20000]` input
//! (4,096 nodes × 6,805 features × 3 feature hops ≈ 20k inputs each).
//! Run: `cargo bench --bench dropout`; the ratio is burn / fast.

use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use burn::nn::DropoutConfig;
use burn::tensor::{Distribution, Tensor};
use criterion::Criterion;
use megagraph_models::FastDropoutConfig;

type Train = Autodiff<Flex>;

/// Rows and columns of the input.
const SHAPE: [usize; 2] = [4096, 20_000];
/// Input dropout probability of the trainer's recipe.
const PROB: f64 = 0.5;

fn main() {
    let device = Default::default();
    let input = Tensor::<Train, 2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &device);
    let burn_dropout = DropoutConfig::new(PROB).init();
    let fast_dropout = FastDropoutConfig::new(PROB).init();

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    let mut group = criterion.benchmark_group("dropout_4096x20000");
    group.bench_function("burn", |b| b.iter(|| burn_dropout.forward(input.clone())));
    group.bench_function("fast", |b| b.iter(|| fast_dropout.forward(input.clone())));
    // the mask alone (host side, before it becomes a tensor)
    let stream = megagraph_models::dropout::PhiloxStream::new(7, 0);
    group.bench_function("fast_mask_only", |b| {
        b.iter(|| megagraph_models::dropout::dropout_mask(SHAPE[0] * SHAPE[1], PROB, stream))
    });
    group.finish();
    criterion.final_summary();
}

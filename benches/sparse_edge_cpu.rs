//! Forward + backward time of sparse edge attention (TorchGT's mode) on Flex: the fused CPU path
//! (what `Flex` and `Autodiff<Flex>` run) against the Burn-ops reference
//! (`megagraph_kernels::reference::sparse_edge`, the backends' default), at the primitive level,
//! on the same inputs.
//!
//! `batch = 1`, `seq = 256`, `heads = 8`, `head_dim = 8`, with two edge sets: 1,024 random edges
//! (an induced subgraph with self-loops), and 16,384 pairs as 64 dense 16×16 blocks (what block
//! reformation produces). Run with `cargo bench --bench sparse_edge_cpu`.

use std::time::Duration;

use burn::backend::Flex;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, SamplingMode};
use megagraph_kernels::{GraphAttentionBackend, SequenceEdges, SparseEdgeInputs, reference};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SEQ: usize = 256;
const HEADS: usize = 8;
const HEAD_DIM: usize = 8;
/// Side of a reformed dense block.
const BLOCK: usize = 16;

/// `count` random `(src, dst)` edges of one sequence.
fn random_edges(rng: &mut ChaCha8Rng, count: usize) -> Vec<(u32, u32)> {
    (0..count)
        .map(|_| (rng.random_range(0..SEQ as u32), rng.random_range(0..SEQ as u32)))
        .collect()
}

/// Every pair of `blocks` distinct random `BLOCK × BLOCK` blocks of one sequence.
fn block_edges(rng: &mut ChaCha8Rng, blocks: usize) -> Vec<(u32, u32)> {
    let side = SEQ / BLOCK;
    let mut grid: Vec<usize> = (0..side * side).collect();
    grid.shuffle(rng);
    let mut edges = Vec::with_capacity(blocks * BLOCK * BLOCK);
    for &block in &grid[..blocks] {
        let (row, column) = (block / side * BLOCK, block % side * BLOCK);
        for dst in row..row + BLOCK {
            edges.extend((column..column + BLOCK).map(|src| (src as u32, dst as u32)));
        }
    }
    edges
}

/// Random q, k, v over `edges` and an upstream gradient of the output.
fn inputs(edges: &[(u32, u32)], seed: u64) -> (SparseEdgeInputs<Flex>, FloatTensor<Flex>) {
    let device = Default::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shape = [1, HEADS, SEQ, HEAD_DIM];
    let mut float = || {
        let values: Vec<f32> = (0..shape.iter().product())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Tensor::<Flex, 4>::from_data(TensorData::new(values, shape), &device)
    };
    let (q, k, v, grad) = (float(), float(), float(), float());
    let edges = SequenceEdges::<Flex>::new(&[edges.to_vec()], SEQ, &device).unwrap_or_else(|e| panic!("{e}"));
    (
        edges.inputs(q, k, v, 1.0 / (HEAD_DIM as f32).sqrt()),
        grad.into_primitive().tensor(),
    )
}

/// One forward + backward of the fused path.
fn fused(x: &(SparseEdgeInputs<Flex>, FloatTensor<Flex>)) {
    let output = Flex::sparse_edge_attention_forward(x.0.clone());
    std::hint::black_box(Flex::sparse_edge_attention_backward(x.0.clone(), output, x.1.clone()));
}

/// One forward + backward of the Burn-ops reference.
fn burn_ops(x: &(SparseEdgeInputs<Flex>, FloatTensor<Flex>)) {
    let output = reference::sparse_edge::forward(x.0.clone());
    std::hint::black_box(reference::sparse_edge::backward(x.0.clone(), output, x.1.clone()));
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let edge_sets = [
        ("1k-edges", random_edges(&mut rng, 1024)),
        ("16k-block-pairs", block_edges(&mut rng, 64)),
    ];
    let mut group = criterion.benchmark_group("sparse_edge_cpu");
    group.sampling_mode(SamplingMode::Flat);
    for (label, edges) in &edge_sets {
        let x = inputs(edges, 11);
        for (name, step) in [("fused", fused as fn(&_)), ("burn-ops", burn_ops)] {
            group.bench_with_input(BenchmarkId::new(name, label), &x, |bench, x| bench.iter(|| step(x)));
        }
    }
    group.finish();
    criterion.final_summary();
}

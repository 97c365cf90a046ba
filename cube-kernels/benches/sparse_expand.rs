//! The host expansion of a sparse distance index: [`BucketIndex::to_dense`] on `Flex` for one
//! sequence of `N` query rows with about 1,000 stored pairs per row (about what distances up to 3
//! store on a graph of average degree 10). Until the CubeCL op expanded its key blocks on the
//! device (`src/cube/densify.rs`), every call of it on a GPU paid this, plus the read-back and the
//! upload of the dense block: each layer's forward and backward pass.
//!
//! `cargo bench -p megagraph-kernels --bench sparse_expand`; `MEGAGRAPH_BENCH_SIZES=4096`
//! overrides the sizes (default 4096,16384).

mod common;

use std::time::Duration;

use burn::backend::Flex;
use criterion::{BenchmarkId, Criterion};
use megagraph_kernels::{BucketIndex, CsrParts, SparseBucketIndex};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Stored pairs drawn per query row (duplicates dropped).
const PAIRS_PER_ROW: usize = 1000;
/// Buckets of the table; the last one is the far bucket.
const BUCKETS: u8 = 5;

/// A random `[1, n, n]` sparse index.
fn index(n: usize, rng: &mut ChaCha8Rng) -> SparseBucketIndex<Flex> {
    let (mut row_offsets, mut columns, mut buckets) = (vec![0u64], Vec::new(), Vec::new());
    for _ in 0..n {
        let mut row: Vec<u32> = (0..PAIRS_PER_ROW.min(n))
            .map(|_| rng.random_range(0..n as u32))
            .collect();
        row.sort_unstable();
        row.dedup();
        for column in row {
            columns.push(column);
            buckets.push(rng.random_range(0..BUCKETS - 1));
        }
        row_offsets.push(columns.len() as u64);
    }
    let parts = CsrParts {
        row_offsets: &row_offsets,
        columns: &columns,
        buckets: &buckets,
    };
    SparseBucketIndex::from_csr(parts, [1, n], n, BUCKETS - 1, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut group = criterion.benchmark_group("sparse_expand");
    for n in common::sizes(&[4096, 16384]) {
        let sparse = index(n, &mut rng);
        group.bench_with_input(BenchmarkId::new("to_dense", n), &sparse, |b, sparse| {
            b.iter(|| {
                BucketIndex::Sparse(sparse.clone())
                    .to_dense()
                    .unwrap_or_else(|e| panic!("{e}"))
                    .dims()
            })
        });
    }
    group.finish();
    criterion.final_summary();
}

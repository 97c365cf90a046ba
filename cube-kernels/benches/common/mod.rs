//! What the kernels' benchmarks share.

/// The problem sizes of a benchmark: `MEGAGRAPH_BENCH_SIZES` (comma-separated; entries that do
/// not parse are skipped), else `default`.
pub fn sizes(default: &[usize]) -> Vec<usize> {
    std::env::var("MEGAGRAPH_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

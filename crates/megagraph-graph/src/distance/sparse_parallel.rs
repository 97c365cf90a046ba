//! Parallel builders of [`SparseDistanceIndex`]es: many sequences at once, or the rows of one
//! long sequence split into chunks (rayon, one [`DistanceWorkspace`] per worker).

use std::ops::Range;

use super::sparse::check_rows;
use super::{
    Bfs, DistanceQuery, DistanceScope, DistanceWorkspace, SparseDistanceIndex, build_parallel,
};
use crate::error::GraphError;
use crate::graph::Graph;

/// Fewest rows of one parallel chunk of [`sparse_distance_index_parallel`]: each chunk
/// registers all `S` sequence nodes in its workspace, so chunks must not be tiny.
const MIN_CHUNK_ROWS: usize = 256;
/// Chunks per rayon thread of [`sparse_distance_index_parallel`]: rows around hubs cost far
/// more than others, so many chunks balance the load (and advance progress bars smoothly).
const CHUNKS_PER_THREAD: usize = 16;

/// Sparse distance indexes of all `sequences`, computed in parallel with rayon (one
/// [`DistanceWorkspace`] per worker). Output `i` belongs to `sequences[i]` and holds the rows
/// `rows` of it, clamped to the sequence's length (so a short last sequence gets fewer, possibly
/// no, rows); `None` means every row of every sequence.
///
/// # Errors
/// The first error (in sequence order) of [`SparseDistanceIndex::new`].
pub fn sparse_distance_indexes(
    graph: &Graph,
    sequences: &[Vec<u32>],
    rows: Option<Range<usize>>,
    max_distance: u8,
    scope: DistanceScope,
) -> Result<Vec<SparseDistanceIndex>, GraphError> {
    sparse_distance_indexes_with_progress(graph, sequences, rows, max_distance, scope, &|_| {})
}

/// [`sparse_distance_indexes`], calling `progress(1)` (from the worker threads) each time the
/// index of one sequence is done, e.g. to advance a progress bar of `sequences.len()` steps.
///
/// # Errors
/// The first error (in sequence order) of [`SparseDistanceIndex::new`];
/// [`GraphError::RowRangeOutOfBounds`] if `rows` has `start > end`.
pub fn sparse_distance_indexes_with_progress(
    graph: &Graph,
    sequences: &[Vec<u32>],
    rows: Option<Range<usize>>,
    max_distance: u8,
    scope: DistanceScope,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<SparseDistanceIndex>, GraphError> {
    let bfs = Bfs::exact(max_distance, scope)?;
    sparse_indexes(graph, sequences, rows, bfs, progress)
}

/// [`sparse_distance_indexes_with_progress`] for `query`, whose budget caps the BFS work per source
/// (see [`BfsBudget`](super::BfsBudget): stored buckets stay exact; rows that hit the budget may
/// lack pairs).
///
/// # Errors
/// As [`sparse_distance_indexes_with_progress`].
pub fn sparse_distance_indexes_budgeted(
    graph: &Graph,
    sequences: &[Vec<u32>],
    rows: Option<Range<usize>>,
    query: DistanceQuery,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<SparseDistanceIndex>, GraphError> {
    let bfs = Bfs::new(query)?;
    sparse_indexes(graph, sequences, rows, bfs, progress)
}

/// The rows `rows` (clamped; `None`: all) of the indexes of all `sequences` under `bfs`, in
/// parallel, calling `progress(1)` after each.
///
/// # Errors
/// [`GraphError::RowRangeOutOfBounds`] if `rows` has `start > end`; else the first error (in
/// sequence order) of [`SparseDistanceIndex::build`].
fn sparse_indexes(
    graph: &Graph,
    sequences: &[Vec<u32>],
    rows: Option<Range<usize>>,
    bfs: Bfs,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<SparseDistanceIndex>, GraphError> {
    if let Some(r) = &rows {
        check_rows(r, usize::MAX)?;
    }
    build_parallel(graph, sequences, |seq, ws| {
        let s = seq.len();
        let block = match &rows {
            Some(r) => r.start.min(s)..r.end.min(s),
            None => 0..s,
        };
        let index = SparseDistanceIndex::build(graph, seq, block, bfs, ws);
        progress(1);
        index
    })
}

/// The rows `rows` (global) of the sparse distance index of ONE sequence `nodes`, built in
/// parallel: the rows are split into chunks (at least 256 rows, about 16 per rayon thread),
/// each built by [`SparseDistanceIndex::with_workspace`] with one workspace per worker, then
/// concatenated into one CSR. Equal to [`SparseDistanceIndex::new`] of the same arguments; meant
/// for long sequences (e.g. `S = 65,536`). `progress(k)` is called (from the worker threads)
/// each time `k` more rows are done, e.g. for a progress bar of `rows.len()` steps.
///
/// Peak memory is about twice the result (chunks, then the concatenation) plus one workspace per
/// worker.
///
/// # Errors
/// As [`SparseDistanceIndex::new`] (for a bad node list, the error of the first chunk).
pub fn sparse_distance_index_parallel(
    graph: &Graph,
    nodes: &[u32],
    rows: Range<usize>,
    max_distance: u8,
    scope: DistanceScope,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SparseDistanceIndex, GraphError> {
    let bfs = Bfs::exact(max_distance, scope)?;
    parallel_index(graph, nodes, rows, bfs, progress)
}

/// [`sparse_distance_index_parallel`] for `query`, whose budget caps the BFS work per source (see
/// [`BfsBudget`](super::BfsBudget): stored buckets stay exact; rows that hit the budget may lack
/// pairs, and [`SparseDistanceIndex::truncated_rows`] counts them). This is what bounds the time of
/// a 65,536-row index on a power-law graph of millions of nodes.
///
/// # Errors
/// As [`sparse_distance_index_parallel`].
pub fn sparse_distance_index_parallel_budgeted(
    graph: &Graph,
    nodes: &[u32],
    rows: Range<usize>,
    query: DistanceQuery,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SparseDistanceIndex, GraphError> {
    let bfs = Bfs::new(query)?;
    parallel_index(graph, nodes, rows, bfs, progress)
}

/// The rows `rows` of the index of ONE sequence `nodes` under `bfs`, built in parallel chunks
/// (see [`sparse_distance_index_parallel`]).
///
/// # Errors
/// As [`SparseDistanceIndex::build`] (for a bad node list, the error of the first chunk).
fn parallel_index(
    graph: &Graph,
    nodes: &[u32],
    rows: Range<usize>,
    bfs: Bfs,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SparseDistanceIndex, GraphError> {
    check_rows(&rows, nodes.len())?;
    let chunk = rows
        .len()
        .div_ceil(CHUNKS_PER_THREAD * rayon::current_num_threads())
        .max(MIN_CHUNK_ROWS);
    let chunks: Vec<Range<usize>> = rows
        .clone()
        .step_by(chunk)
        .map(|start| start..(start + chunk).min(rows.end))
        .collect();
    if chunks.len() <= 1 {
        let mut ws = DistanceWorkspace::new(graph.num_nodes());
        let index = SparseDistanceIndex::build(graph, nodes, rows.clone(), bfs, &mut ws)?;
        progress(rows.len());
        return Ok(index);
    }
    let blocks = build_parallel(graph, &chunks, |block, ws| {
        let index = SparseDistanceIndex::build(graph, nodes, block.clone(), bfs, ws);
        progress(block.len());
        index
    })?;
    SparseDistanceIndex::concat(rows.start, nodes.len(), bfs.max_distance, blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::BfsBudget;
    use crate::distance::tests::{chunked_case, random_graph};
    use crate::graph::GraphOptions;
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    use rand_chacha::ChaCha8Rng;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn many_sequences_match_single_builds() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (g, seqs) = chunked_case(&mut rng);
        for rows in [None, Some(10..30), Some(30..40)] {
            let ticks = AtomicUsize::new(0);
            let many = sparse_distance_indexes_with_progress(
                &g,
                &seqs,
                rows.clone(),
                3,
                DistanceScope::Graph,
                &|n| {
                    ticks.fetch_add(n, Ordering::Relaxed);
                },
            )
            .unwrap();
            assert_eq!(ticks.into_inner(), seqs.len());
            assert_eq!(many.len(), seqs.len());
            for (idx, seq) in many.iter().zip(&seqs) {
                let s = seq.len();
                let block = rows.clone().map_or(0..s, |r| r.start.min(s)..r.end.min(s));
                let single =
                    SparseDistanceIndex::new(&g, seq, block, 3, DistanceScope::Graph).unwrap();
                assert_eq!(idx, &single);
            }
        }
        assert!(matches!(
            sparse_distance_indexes(&g, &seqs, None, 255, DistanceScope::Graph),
            Err(GraphError::MaxDistanceTooLarge { .. })
        ));
        let bad = vec![vec![0, 1], vec![2, 2]];
        assert!(matches!(
            sparse_distance_indexes(&g, &bad, None, 2, DistanceScope::Graph),
            Err(GraphError::DuplicateNode { node: 2, .. })
        ));
    }

    #[test]
    fn one_long_sequence_in_chunks_matches_single_build() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let n = 3000;
        let g = random_graph(&mut rng, n, 4 * n, false);
        let mut all: Vec<u32> = (0..n as u32).collect();
        all.shuffle(&mut rng);
        let nodes = &all[..2500];
        for (rows, scope) in [
            (0..2500, DistanceScope::Graph),
            (17..2100, DistanceScope::Induced),
            (100..200, DistanceScope::Graph),
            (7..7, DistanceScope::Graph),
        ] {
            let done = AtomicUsize::new(0);
            let par = sparse_distance_index_parallel(&g, nodes, rows.clone(), 4, scope, &|k| {
                done.fetch_add(k, Ordering::Relaxed);
            })
            .unwrap();
            assert_eq!(done.into_inner(), rows.len());
            let single = SparseDistanceIndex::new(&g, nodes, rows.clone(), 4, scope).unwrap();
            assert_eq!(par, single, "{rows:?} {scope:?}");
            assert_eq!(par.first_row(), rows.start);
        }
        // With a BFS budget the chunked build still equals the single build, row for row.
        let budget = BfsBudget {
            max_arcs_per_source: Some(6),
        };
        let query = DistanceQuery::exact(4, DistanceScope::Graph).with_budget(budget);
        let par =
            sparse_distance_index_parallel_budgeted(&g, nodes, 0..2500, query, &|_| {}).unwrap();
        let single = SparseDistanceIndex::with_workspace_budget(
            &g,
            nodes,
            0..2500,
            query,
            &mut DistanceWorkspace::new(n),
        )
        .unwrap();
        assert_eq!(par, single);
        assert!(par.truncated_rows() > 0);
        let many =
            sparse_distance_indexes_budgeted(&g, &[nodes.to_vec()], None, query, &|_| {}).unwrap();
        assert_eq!(many, vec![single]);
        let opts = GraphOptions::default();
        let small = Graph::from_edges(3, &[(0, 1)], &opts).unwrap();
        let none = &|_| {};
        assert!(matches!(
            sparse_distance_index_parallel(&small, &[0, 1], 0..3, 2, DistanceScope::Graph, none),
            Err(GraphError::RowRangeOutOfBounds { .. })
        ));
        let long: Vec<u32> = (0..600).map(|i| i % 3).collect();
        let dup =
            sparse_distance_index_parallel(&small, &long, 0..600, 2, DistanceScope::Graph, none);
        assert!(matches!(
            dup,
            Err(GraphError::DuplicateNode { node: 0, .. })
        ));
    }
}

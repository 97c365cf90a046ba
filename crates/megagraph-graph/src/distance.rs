//! Shortest-path distance indexes of node sequences, stored as `u8` buckets.
//!
//! A Graph Transformer's spatial encoding needs `d(i, j)` for every pair of nodes of a
//! sequence. [`DistanceIndex`] stores exactly that, one byte per pair (`[S, S]`), never
//! `S * S * H` floats; the model maps buckets to per-head biases itself.

mod bfs;
mod paths;
mod sparse;
mod sparse_parallel;
#[cfg(test)]
mod tests;
mod workspace;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::GraphError;
use crate::graph::Graph;
use bfs::{Bfs, bfs_visit, prepare_sequence};

pub use paths::{EdgePathIndex, NO_ARC};
pub use sparse::SparseDistanceIndex;
pub use sparse_parallel::{
    sparse_distance_index_parallel, sparse_distance_index_parallel_budgeted,
    sparse_distance_indexes, sparse_distance_indexes_budgeted,
    sparse_distance_indexes_with_progress,
};
pub use workspace::DistanceWorkspace;

/// The largest allowed `max_distance` (255 is reserved for "farther or unreachable").
pub const MAX_DISTANCE_LIMIT: u8 = 254;

/// Default of [`BfsBudget::max_arcs_per_source`]: `2^16` adjacency entries per BFS source (on a
/// 2.5M-node / 120M-arc power-law graph, about 1,700 rows a second on 2 cores, and 550 pairs
/// within distance 3 kept per row of a 50k-node sequence).
pub const DEFAULT_MAX_ARCS_PER_SOURCE: usize = 1 << 16;

/// A cap on the work of one bounded BFS (one row of a distance index), for high-degree graphs.
///
/// On a power-law graph a depth-3 BFS from almost any node reaches a hub within two steps and
/// then scans a large part of the graph (on 2.5M nodes / 120M arcs, tens of millions of arcs
/// per source), so exact rows for a sequence of 65,536 sources are out of reach. With
/// `max_arcs_per_source = Some(m)`, the BFS of one source stops as soon as it has examined `m`
/// adjacency entries (a neighbour list is cut in the middle if need be).
///
/// What this does to exactness: BFS finds nodes level by level, and it only ever stops in the
/// middle of a level, so every node it found has its exact distance; the nodes it had not yet
/// found are left out. Hence, for every pair, the capped bucket is never smaller than the exact
/// one; a capped bucket `<= max_distance` equals the exact distance; only pairs at the exact
/// distance `d <= max_distance` that the BFS had not reached read as the far bucket
/// `max_distance + 1` (always pairs at distance >= the level where the budget ran out). A row
/// whose BFS stayed within the budget is exact, and a graph with at most `m` arcs never hits it.
/// [`SparseDistanceIndex::truncated_rows`] counts the rows that hit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct BfsBudget {
    /// The most adjacency entries (arcs) one BFS source may examine; `None` means unlimited
    /// (exact). Default: `Some(`[`DEFAULT_MAX_ARCS_PER_SOURCE`]`)`.
    pub max_arcs_per_source: Option<usize>,
}

impl BfsBudget {
    /// No cap: exact distances whatever the work.
    pub const EXACT: BfsBudget = BfsBudget {
        max_arcs_per_source: None,
    };
}

impl Default for BfsBudget {
    fn default() -> Self {
        Self {
            max_arcs_per_source: Some(DEFAULT_MAX_ARCS_PER_SOURCE),
        }
    }
}

/// Where shortest paths may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DistanceScope {
    /// Paths through any node of the whole graph (bounded BFS from each sequence node).
    #[default]
    Graph,
    /// Paths through nodes of the sequence only (BFS in the induced subgraph).
    Induced,
}

/// What each row of a distance index records: the shortest-path distances from its source up to
/// `max_distance`, along paths through the nodes `scope` allows, found by a BFS within `budget`.
///
/// The `*_budget`/`*_budgeted` builders take one; the others are the exact query
/// ([`DistanceQuery::exact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DistanceQuery {
    /// The longest distance stored exactly, at most [`MAX_DISTANCE_LIMIT`]; farther or
    /// unreachable pairs read as the far bucket `max_distance + 1`.
    pub max_distance: u8,
    /// Where paths may run.
    pub scope: DistanceScope,
    /// The cap on the work of each row's BFS.
    pub budget: BfsBudget,
}

impl DistanceQuery {
    /// Exact distances up to `max_distance` in `scope` (no budget, [`BfsBudget::EXACT`]).
    pub fn exact(max_distance: u8, scope: DistanceScope) -> Self {
        Self {
            max_distance,
            scope,
            budget: BfsBudget::EXACT,
        }
    }

    /// This query with each row's BFS capped by `budget`.
    pub fn with_budget(self, budget: BfsBudget) -> Self {
        Self { budget, ..self }
    }
}

/// Shortest-path distances between the nodes of one sequence, `[S, S]` bytes, row-major:
/// `get(i, j)` is the length of the shortest path from `nodes[i]` to `nodes[j]` following arcs
/// `src -> dst`, exact for `0..=max_distance`, and `max_distance + 1` for "farther or
/// unreachable". The diagonal is 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistanceIndex {
    seq_len: usize,
    max_distance: u8,
    data: Vec<u8>,
}

impl DistanceIndex {
    /// Computes the index of the sequence `nodes`.
    ///
    /// [`DistanceScope::Graph`] runs a BFS of depth `max_distance` from every sequence node over
    /// the whole graph, stopping early once every sequence node is reached;
    /// [`DistanceScope::Induced`] runs BFS in the subgraph induced by `nodes`. This call
    /// allocates a fresh [`DistanceWorkspace`]; use [`DistanceIndex::with_workspace`] in loops.
    ///
    /// # Errors
    /// [`GraphError::MaxDistanceTooLarge`] if `max_distance > 254`,
    /// [`GraphError::NodeOutOfRange`] / [`GraphError::DuplicateNode`] for a bad node list.
    pub fn new(
        graph: &Graph,
        nodes: &[u32],
        max_distance: u8,
        scope: DistanceScope,
    ) -> Result<Self, GraphError> {
        let mut ws = DistanceWorkspace::new(graph.num_nodes());
        Self::with_workspace(graph, nodes, max_distance, scope, &mut ws)
    }

    /// [`DistanceIndex::new`] reusing `workspace`, which must have been created for a graph
    /// with this node count.
    ///
    /// # Errors
    /// As [`DistanceIndex::new`]; also [`GraphError::InvalidConfig`] if the workspace is for a
    /// different node count.
    pub fn with_workspace(
        graph: &Graph,
        nodes: &[u32],
        max_distance: u8,
        scope: DistanceScope,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        Self::build(graph, nodes, Bfs::exact(max_distance, scope)?, ws)
    }

    /// [`DistanceIndex::with_workspace`] for `query`, whose budget caps the BFS work per source:
    /// with a finite budget, buckets may read "far" where the exact distance is within
    /// `max_distance`, never smaller (see [`BfsBudget`]).
    ///
    /// # Errors
    /// As [`DistanceIndex::with_workspace`].
    pub fn with_workspace_budget(
        graph: &Graph,
        nodes: &[u32],
        query: DistanceQuery,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        Self::build(graph, nodes, Bfs::new(query)?, ws)
    }

    /// The index of the sequence `nodes`, a `bfs` from each of them.
    fn build(
        graph: &Graph,
        nodes: &[u32],
        bfs: Bfs,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        prepare_sequence(graph, nodes, ws)?;
        let s = nodes.len();
        let mut data = vec![bfs.far_bucket(); s * s];
        for (i, &source) in nodes.iter().enumerate() {
            let row = &mut data[i * s..(i + 1) * s];
            row[i] = 0;
            bfs_visit(graph, source, bfs, ws, s - 1, |p, depth| row[p] = depth);
        }
        Ok(Self {
            seq_len: s,
            max_distance: bfs.max_distance,
            data,
        })
    }

    /// Sequence length `S`.
    pub fn len(&self) -> usize {
        self.seq_len
    }

    /// Whether the sequence is empty.
    pub fn is_empty(&self) -> bool {
        self.seq_len == 0
    }

    /// The largest exactly stored distance.
    pub fn max_distance(&self) -> u8 {
        self.max_distance
    }

    /// Number of distinct bucket values: `max_distance + 2` (`0..=max_distance` and "farther").
    pub fn num_buckets(&self) -> usize {
        usize::from(self.max_distance) + 2
    }

    /// The `[S, S]` row-major bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Consumes the index, returning its `[S, S]` row-major bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }

    /// Distances from `nodes[i]` to every sequence node, shape `[S]`.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.data[i * self.seq_len..(i + 1) * self.seq_len]
    }

    /// Distance bucket from `nodes[i]` to `nodes[j]`.
    ///
    /// # Panics
    /// If `i` or `j` is `>= len()`.
    pub fn get(&self, i: usize, j: usize) -> u8 {
        assert!(
            j < self.seq_len,
            "column {j} out of range for length {}",
            self.seq_len
        );
        self.data[i * self.seq_len + j]
    }
}

/// Distance indexes of all `sequences`, computed in parallel with rayon (one
/// [`DistanceWorkspace`] per worker). Output `i` belongs to `sequences[i]`.
///
/// # Errors
/// The first error (in sequence order) of [`DistanceIndex::new`].
pub fn distance_indexes(
    graph: &Graph,
    sequences: &[Vec<u32>],
    max_distance: u8,
    scope: DistanceScope,
) -> Result<Vec<DistanceIndex>, GraphError> {
    distance_indexes_with_progress(graph, sequences, max_distance, scope, &|_| {})
}

/// [`distance_indexes`], calling `progress(1)` (from the worker threads) each time the index of
/// one sequence is done, e.g. to advance a progress bar of `sequences.len()` steps.
///
/// # Errors
/// The first error (in sequence order) of [`DistanceIndex::new`].
pub fn distance_indexes_with_progress(
    graph: &Graph,
    sequences: &[Vec<u32>],
    max_distance: u8,
    scope: DistanceScope,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<DistanceIndex>, GraphError> {
    let bfs = Bfs::exact(max_distance, scope)?;
    dense_indexes(graph, sequences, bfs, progress)
}

/// [`distance_indexes_with_progress`] for `query`, whose budget caps the BFS work per source
/// (see [`BfsBudget`]: buckets are never smaller than the exact ones, and exact on rows that stayed
/// within the budget).
///
/// # Errors
/// The first error (in sequence order) of [`DistanceIndex::new`].
pub fn distance_indexes_budgeted(
    graph: &Graph,
    sequences: &[Vec<u32>],
    query: DistanceQuery,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<DistanceIndex>, GraphError> {
    let bfs = Bfs::new(query)?;
    dense_indexes(graph, sequences, bfs, progress)
}

/// The indexes of all `sequences` under `bfs`, in parallel, calling `progress(1)` after each.
///
/// # Errors
/// The first error (in sequence order) of [`DistanceIndex::build`].
fn dense_indexes(
    graph: &Graph,
    sequences: &[Vec<u32>],
    bfs: Bfs,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<DistanceIndex>, GraphError> {
    build_parallel(graph, sequences, |seq, ws| {
        let index = DistanceIndex::build(graph, seq, bfs, ws);
        progress(1);
        index
    })
}

/// `build(item, workspace)` for every item of `items`, in parallel with rayon (one
/// [`DistanceWorkspace`] per worker). Output `i` belongs to `items[i]`.
///
/// # Errors
/// The first error of `build` in item order.
fn build_parallel<I: Sync, T: Send>(
    graph: &Graph,
    items: &[I],
    build: impl Fn(&I, &mut DistanceWorkspace) -> Result<T, GraphError> + Sync + Send,
) -> Result<Vec<T>, GraphError> {
    let results: Vec<Result<T, GraphError>> = items
        .par_iter()
        .map_init(
            || DistanceWorkspace::new(graph.num_nodes()),
            |ws, item| build(item, ws),
        )
        .collect();
    results.into_iter().collect()
}

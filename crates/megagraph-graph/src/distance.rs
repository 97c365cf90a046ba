//! Shortest-path distance indexes of node sequences, stored as `u8` buckets.
//!
//! A Graph Transformer's spatial encoding needs `d(i, j)` for every pair of nodes of a
//! sequence. [`DistanceIndex`] stores exactly that, one byte per pair (`[S, S]`), never
//! `S * S * H` floats; the model maps buckets to per-head biases itself.

mod sparse;
mod sparse_parallel;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::GraphError;
use crate::graph::Graph;

pub use sparse::SparseDistanceIndex;
pub use sparse_parallel::{
    sparse_distance_index_parallel, sparse_distance_index_parallel_budgeted,
    sparse_distance_indexes, sparse_distance_indexes_budgeted,
    sparse_distance_indexes_with_progress,
};

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

/// Reusable scratch memory for distance computations on one graph: per-node stamp arrays, so a
/// BFS costs `O(visited)` rather than `O(N)`. One per thread.
#[derive(Debug, Clone)]
pub struct DistanceWorkspace {
    /// `visit_stamp[v] == stamp` marks `v` visited in the current BFS.
    visit_stamp: Vec<u32>,
    stamp: u32,
    /// `member_stamp[v] == member_round` marks `v` as in the current sequence, at `position[v]`.
    member_stamp: Vec<u32>,
    member_round: u32,
    position: Vec<u32>,
    frontier: Vec<u32>,
    next: Vec<u32>,
    /// `(position, bucket)` pairs of the sparse row being built.
    row_entries: Vec<(u32, u8)>,
}

impl DistanceWorkspace {
    /// Scratch memory for a graph of `num_nodes` nodes (three zeroed `u32` arrays of that
    /// length; the pages are touched only where a BFS goes).
    pub fn new(num_nodes: usize) -> Self {
        Self {
            visit_stamp: vec![0; num_nodes],
            stamp: 0,
            member_stamp: vec![0; num_nodes],
            member_round: 0,
            position: vec![0; num_nodes],
            frontier: Vec::new(),
            next: Vec::new(),
            row_entries: Vec::new(),
        }
    }

    fn next_stamp(&mut self) -> u32 {
        if self.stamp == u32::MAX {
            self.visit_stamp.fill(0);
            self.stamp = 0;
        }
        self.stamp += 1;
        self.stamp
    }

    fn next_member_round(&mut self) -> u32 {
        if self.member_round == u32::MAX {
            self.member_stamp.fill(0);
            self.member_round = 0;
        }
        self.member_round += 1;
        self.member_round
    }

    fn position_of(&self, v: u32) -> Option<usize> {
        (self.member_stamp[v as usize] == self.member_round)
            .then(|| self.position[v as usize] as usize)
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
        Self::with_workspace(
            graph,
            nodes,
            max_distance,
            scope,
            &mut DistanceWorkspace::new(graph.num_nodes()),
        )
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
        Self::with_workspace_budget(graph, nodes, max_distance, scope, BfsBudget::EXACT, ws)
    }

    /// [`DistanceIndex::with_workspace`] with a cap on the BFS work per source: with a finite
    /// `budget`, buckets may read "far" where the exact distance is within `max_distance`, never
    /// smaller (see [`BfsBudget`]).
    ///
    /// # Errors
    /// As [`DistanceIndex::with_workspace`].
    pub fn with_workspace_budget(
        graph: &Graph,
        nodes: &[u32],
        max_distance: u8,
        scope: DistanceScope,
        budget: BfsBudget,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        prepare_sequence(graph, nodes, max_distance, ws)?;
        let s = nodes.len();
        let far = max_distance + 1;
        let mut data = vec![far; s * s];
        for (i, &source) in nodes.iter().enumerate() {
            let row = &mut data[i * s..(i + 1) * s];
            row[i] = 0;
            if max_distance == 0 || s == 1 {
                continue;
            }
            bfs_visit(
                graph,
                source,
                max_distance,
                scope,
                budget,
                ws,
                s - 1,
                |p, depth| {
                    row[p] = depth;
                },
            );
        }
        Ok(Self {
            seq_len: s,
            max_distance,
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

/// Checks `max_distance`, the workspace's size and the node list, and registers `nodes` as the
/// current sequence members of `ws` (at their positions), ready for [`bfs_visit`].
///
/// # Errors
/// [`GraphError::MaxDistanceTooLarge`], [`GraphError::InvalidConfig`] (workspace of another
/// node count), [`GraphError::NodeOutOfRange`], [`GraphError::DuplicateNode`].
fn prepare_sequence(
    graph: &Graph,
    nodes: &[u32],
    max_distance: u8,
    ws: &mut DistanceWorkspace,
) -> Result<(), GraphError> {
    if max_distance > MAX_DISTANCE_LIMIT {
        return Err(GraphError::MaxDistanceTooLarge { max_distance });
    }
    let n = graph.num_nodes();
    if ws.visit_stamp.len() != n {
        return Err(GraphError::InvalidConfig {
            field: "workspace",
            value: ws.visit_stamp.len().to_string(),
            reason: "a workspace must be created for the graph's node count",
        });
    }
    let round = ws.next_member_round();
    for (i, &v) in nodes.iter().enumerate() {
        if v as usize >= n {
            return Err(GraphError::NodeOutOfRange {
                node: u64::from(v),
                num_nodes: n,
                position: i,
            });
        }
        if ws.member_stamp[v as usize] == round {
            return Err(GraphError::DuplicateNode {
                node: v,
                first: ws.position[v as usize] as usize,
                second: i,
            });
        }
        ws.member_stamp[v as usize] = round;
        ws.position[v as usize] = i as u32;
    }
    Ok(())
}

/// BFS from `source` up to depth `max_distance` over the members registered by
/// [`prepare_sequence`], calling `visit(position, depth)` once for every other member reached
/// (depth `1..=max_distance`, in nondecreasing depth order; never for `source` itself); stops
/// once `targets` other members are found, or once `budget` adjacency entries were examined
/// (see [`BfsBudget`]). Returns whether the budget stopped it. Costs `O(arcs examined)`,
/// never `O(N)`.
#[allow(clippy::too_many_arguments)]
fn bfs_visit(
    graph: &Graph,
    source: u32,
    max_distance: u8,
    scope: DistanceScope,
    budget: BfsBudget,
    ws: &mut DistanceWorkspace,
    targets: usize,
    mut visit: impl FnMut(usize, u8),
) -> bool {
    let stamp = ws.next_stamp();
    ws.visit_stamp[source as usize] = stamp;
    let mut frontier = std::mem::take(&mut ws.frontier);
    let mut next = std::mem::take(&mut ws.next);
    frontier.clear();
    frontier.push(source);
    let mut found = 0usize;
    let mut left = budget.max_arcs_per_source.unwrap_or(usize::MAX);
    let mut truncated = false;
    'levels: for depth in 1..=max_distance {
        next.clear();
        // Nodes first found at the last level are never expanded: only members matter there.
        let last = depth == max_distance;
        for &u in &frontier {
            let all = graph.neighbors(u);
            let row = if all.len() > left {
                truncated = true;
                &all[..left]
            } else {
                all
            };
            left -= row.len();
            for &w in row {
                if ws.visit_stamp[w as usize] == stamp {
                    continue;
                }
                let pos = ws.position_of(w);
                if pos.is_none() && (last || scope == DistanceScope::Induced) {
                    continue;
                }
                ws.visit_stamp[w as usize] = stamp;
                if let Some(p) = pos {
                    visit(p, depth);
                    found += 1;
                    if found == targets {
                        // Every target is found: nothing was lost, whatever the budget.
                        truncated = false;
                        break 'levels;
                    }
                }
                if !last {
                    next.push(w);
                }
            }
            if truncated {
                break 'levels;
            }
        }
        if next.is_empty() {
            break;
        }
        std::mem::swap(&mut frontier, &mut next);
    }
    ws.frontier = frontier;
    ws.next = next;
    truncated
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
    distance_indexes_budgeted(
        graph,
        sequences,
        max_distance,
        scope,
        BfsBudget::EXACT,
        progress,
    )
}

/// [`distance_indexes_with_progress`] with a cap on the BFS work per source (see
/// [`BfsBudget`]: buckets are never smaller than the exact ones, and exact on rows that stayed
/// within the budget).
///
/// # Errors
/// The first error (in sequence order) of [`DistanceIndex::new`].
pub fn distance_indexes_budgeted(
    graph: &Graph,
    sequences: &[Vec<u32>],
    max_distance: u8,
    scope: DistanceScope,
    budget: BfsBudget,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<DistanceIndex>, GraphError> {
    if max_distance > MAX_DISTANCE_LIMIT {
        return Err(GraphError::MaxDistanceTooLarge { max_distance });
    }
    sequences
        .par_iter()
        .map_init(
            || DistanceWorkspace::new(graph.num_nodes()),
            |ws, seq| {
                let index = DistanceIndex::with_workspace_budget(
                    graph,
                    seq,
                    max_distance,
                    scope,
                    budget,
                    ws,
                );
                progress(1);
                index
            },
        )
        .collect()
}

#[cfg(test)]
mod tests;

//! [`SparseDistanceIndex`]: the shortest-path buckets of a block of query rows of one sequence,
//! stored as CSR (only the pairs within `max_distance`), for sequences too long for `[S, S]`.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{
    Bfs, DistanceIndex, DistanceQuery, DistanceScope, DistanceWorkspace, bfs_visit,
    prepare_sequence,
};
use crate::error::GraphError;
use crate::graph::Graph;

/// Shortest-path distance buckets from the nodes of a block of query rows of one sequence to
/// every node of the sequence, stored sparsely.
///
/// The block holds the global rows `first_row..first_row + len()` of a sequence of `S =
/// seq_len()` nodes. Row `i` of the block (local, `0..len()`) is the sequence position
/// `first_row + i`; columns are global sequence positions `0..S`. As CSR:
/// - `row_offsets`: `[len() + 1]` `u64`, row `i`'s entries are `row_offsets[i]..row_offsets[i + 1]`;
/// - `columns`: `[nnz]` `u32` sequence positions, strictly ascending within each row;
/// - `buckets`: `[nnz]` `u8` distances `0..=max_distance` (the diagonal is stored with bucket 0).
///
/// Every pair whose distance is at most `max_distance` is stored; every pair not stored reads as
/// the far bucket `max_distance + 1` ("farther or unreachable"). The buckets equal those of a
/// [`DistanceIndex`] of the same sequence, `max_distance` and scope.
///
/// Built with a finite [`BfsBudget`](super::BfsBudget), rows whose BFS hit the budget may leave out
/// pairs within `max_distance` (they read as far; stored buckets are always exact);
/// [`Self::truncated_rows`] counts them.
///
/// Deserializing checks every invariant above (a malformed file is an error, never a panic
/// later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// the derived (de)serializers are inherent functions; the trait impls below check the fields
#[serde(remote = "Self")]
pub struct SparseDistanceIndex {
    first_row: usize,
    seq_len: usize,
    max_distance: u8,
    row_offsets: Vec<u64>,
    columns: Vec<u32>,
    buckets: Vec<u8>,
    #[serde(default)]
    truncated_rows: usize,
}

/// Checks that `rows` lies within `0..seq_len`.
pub(super) fn check_rows(rows: &Range<usize>, seq_len: usize) -> Result<(), GraphError> {
    if rows.start > rows.end || rows.end > seq_len {
        return Err(GraphError::RowRangeOutOfBounds {
            start: rows.start,
            end: rows.end,
            seq_len,
        });
    }
    Ok(())
}

impl SparseDistanceIndex {
    /// Computes the rows `rows` (global sequence positions) of the distance index of the
    /// sequence `nodes`: a bounded BFS from `nodes[i]` for each `i` in `rows` only, as in
    /// [`DistanceIndex::new`]. Memory is `O(nnz + len())` plus a [`DistanceWorkspace`] of the
    /// graph's node count; nothing `[S, S]` or `[rows, S]` is allocated. Allocates a fresh
    /// workspace; use [`SparseDistanceIndex::with_workspace`] in loops.
    ///
    /// # Errors
    /// [`GraphError::MaxDistanceTooLarge`] if `max_distance > 254`,
    /// [`GraphError::NodeOutOfRange`] / [`GraphError::DuplicateNode`] for a bad node list,
    /// [`GraphError::RowRangeOutOfBounds`] if `rows` is not within `0..nodes.len()`.
    pub fn new(
        graph: &Graph,
        nodes: &[u32],
        rows: Range<usize>,
        max_distance: u8,
        scope: DistanceScope,
    ) -> Result<Self, GraphError> {
        let mut ws = DistanceWorkspace::new(graph.num_nodes());
        Self::with_workspace(graph, nodes, rows, max_distance, scope, &mut ws)
    }

    /// [`SparseDistanceIndex::new`] reusing `ws`, which must have been created for a graph with
    /// this node count.
    ///
    /// # Errors
    /// As [`SparseDistanceIndex::new`]; also [`GraphError::InvalidConfig`] if the workspace is
    /// for a different node count.
    pub fn with_workspace(
        graph: &Graph,
        nodes: &[u32],
        rows: Range<usize>,
        max_distance: u8,
        scope: DistanceScope,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        Self::build(graph, nodes, rows, Bfs::exact(max_distance, scope)?, ws)
    }

    /// [`SparseDistanceIndex::with_workspace`] for `query`, whose budget caps the BFS work per
    /// source: with a finite budget, pairs within `max_distance` may be left out (read as far) on
    /// rows that hit it, stored buckets stay exact (see [`BfsBudget`](super::BfsBudget);
    /// [`Self::truncated_rows`] counts those rows).
    ///
    /// # Errors
    /// As [`SparseDistanceIndex::with_workspace`].
    pub fn with_workspace_budget(
        graph: &Graph,
        nodes: &[u32],
        rows: Range<usize>,
        query: DistanceQuery,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        Self::build(graph, nodes, rows, Bfs::new(query)?, ws)
    }

    /// The rows `rows` (global) of the index of the sequence `nodes`, a `bfs` from each.
    pub(super) fn build(
        graph: &Graph,
        nodes: &[u32],
        rows: Range<usize>,
        bfs: Bfs,
        ws: &mut DistanceWorkspace,
    ) -> Result<Self, GraphError> {
        let s = nodes.len();
        check_rows(&rows, s)?;
        prepare_sequence(graph, nodes, ws)?;
        let mut row_offsets = Vec::with_capacity(rows.len() + 1);
        row_offsets.push(0u64);
        let mut columns = Vec::with_capacity(rows.len());
        let mut buckets = Vec::with_capacity(rows.len());
        let mut entries = std::mem::take(&mut ws.row_entries);
        let mut truncated_rows = 0usize;
        for i in rows.clone() {
            entries.clear();
            entries.push((i as u32, 0));
            let truncated = bfs_visit(graph, nodes[i], bfs, ws, s - 1, |p, depth| {
                entries.push((p as u32, depth));
            });
            truncated_rows += usize::from(truncated);
            entries.sort_unstable_by_key(|&(p, _)| p);
            columns.extend(entries.iter().map(|&(p, _)| p));
            buckets.extend(entries.iter().map(|&(_, b)| b));
            row_offsets.push(columns.len() as u64);
        }
        ws.row_entries = entries;
        columns.shrink_to_fit();
        buckets.shrink_to_fit();
        Ok(Self {
            first_row: rows.start,
            seq_len: s,
            max_distance: bfs.max_distance,
            row_offsets,
            columns,
            buckets,
            truncated_rows,
        })
    }

    /// The rows `rows` (global) of a dense index, stored sparsely.
    ///
    /// # Errors
    /// [`GraphError::RowRangeOutOfBounds`] if `rows` is not within `0..dense.len()`.
    pub fn from_dense(dense: &DistanceIndex, rows: Range<usize>) -> Result<Self, GraphError> {
        check_rows(&rows, dense.len())?;
        let max_distance = dense.max_distance();
        let mut row_offsets = Vec::with_capacity(rows.len() + 1);
        row_offsets.push(0u64);
        let mut columns = Vec::new();
        let mut buckets = Vec::new();
        for i in rows.clone() {
            for (j, &b) in dense.row(i).iter().enumerate() {
                if b <= max_distance {
                    columns.push(j as u32);
                    buckets.push(b);
                }
            }
            row_offsets.push(columns.len() as u64);
        }
        Ok(Self {
            first_row: rows.start,
            seq_len: dense.len(),
            max_distance,
            row_offsets,
            columns,
            buckets,
            truncated_rows: 0,
        })
    }

    /// Concatenates blocks of consecutive rows of one sequence (in order) into one index.
    /// `first_row` is the block's first global row, used when `blocks` is empty.
    ///
    /// # Errors
    /// [`GraphError::InvalidConfig`] if the blocks disagree on `seq_len` or `max_distance`, or
    /// are not consecutive starting at `first_row`.
    pub(super) fn concat(
        first_row: usize,
        seq_len: usize,
        max_distance: u8,
        blocks: Vec<Self>,
    ) -> Result<Self, GraphError> {
        let rows: usize = blocks.iter().map(Self::len).sum();
        let nnz: usize = blocks.iter().map(Self::nnz).sum();
        let mut row_offsets = Vec::with_capacity(rows + 1);
        row_offsets.push(0u64);
        let mut columns = Vec::with_capacity(nnz);
        let mut buckets = Vec::with_capacity(nnz);
        let mut next_row = first_row;
        let mut truncated_rows = 0;
        for block in blocks {
            if block.seq_len != seq_len
                || block.max_distance != max_distance
                || block.first_row != next_row
            {
                return Err(GraphError::InvalidConfig {
                    field: "blocks",
                    value: format!(
                        "block at row {} (S {}, max_distance {})",
                        block.first_row, block.seq_len, block.max_distance
                    ),
                    reason: "blocks must be consecutive rows of one index",
                });
            }
            let base = columns.len() as u64;
            row_offsets.extend(block.row_offsets[1..].iter().map(|&o| o + base));
            columns.extend_from_slice(&block.columns);
            buckets.extend_from_slice(&block.buckets);
            truncated_rows += block.truncated_rows;
            next_row += block.len();
        }
        Ok(Self {
            first_row,
            seq_len,
            max_distance,
            row_offsets,
            columns,
            buckets,
            truncated_rows,
        })
    }

    /// Number of rows whose BFS hit the [`BfsBudget`](super::BfsBudget) it was built with (0 for an
    /// exact build): only these rows may lack pairs within `max_distance`.
    pub fn truncated_rows(&self) -> usize {
        self.truncated_rows
    }

    /// Number of rows of the block.
    pub fn len(&self) -> usize {
        self.row_offsets.len() - 1
    }

    /// Whether the block has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The global sequence positions of the block's rows, `first_row..first_row + len()`.
    pub fn global_rows(&self) -> Range<usize> {
        self.first_row..self.first_row + self.len()
    }

    /// Global sequence position of the block's first row.
    pub fn first_row(&self) -> usize {
        self.first_row
    }

    /// Number of columns: the sequence length `S`.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The largest exactly stored distance.
    pub fn max_distance(&self) -> u8 {
        self.max_distance
    }

    /// Number of distinct bucket values: `max_distance + 2` (`0..=max_distance` and "farther").
    pub fn num_buckets(&self) -> usize {
        usize::from(self.max_distance) + 2
    }

    /// The bucket of every pair not stored: `max_distance + 1`.
    pub fn far_bucket(&self) -> u8 {
        self.max_distance + 1
    }

    /// Number of stored pairs (including the diagonal).
    pub fn nnz(&self) -> usize {
        self.columns.len()
    }

    /// Row offsets, `[len() + 1]`.
    pub fn row_offsets(&self) -> &[u64] {
        &self.row_offsets
    }

    /// Column (global sequence position) of every stored pair, `[nnz]`.
    pub fn columns(&self) -> &[u32] {
        &self.columns
    }

    /// Bucket of every stored pair, `[nnz]`, each `0..=max_distance`.
    pub fn buckets(&self) -> &[u8] {
        &self.buckets
    }

    /// Bytes of the CSR arrays: `8 * (len() + 1) + 4 * nnz + nnz`.
    pub fn bytes(&self) -> usize {
        8 * self.row_offsets.len() + 4 * self.columns.len() + self.buckets.len()
    }

    /// Bytes the same rows take as a dense `[len(), S]` `u8` block.
    pub fn dense_bytes(&self) -> usize {
        self.len() * self.seq_len
    }

    /// The stored pairs of local row `i`: columns (ascending) and their buckets, both `[k]`.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn row(&self, i: usize) -> (&[u32], &[u8]) {
        let start = self.row_offsets[i] as usize;
        let end = self.row_offsets[i + 1] as usize;
        (&self.columns[start..end], &self.buckets[start..end])
    }

    /// Bucket from local row `i` (sequence position `first_row + i`) to sequence position `j`
    /// (binary search).
    ///
    /// # Panics
    /// If `i >= len()` or `j >= seq_len()`.
    pub fn get(&self, i: usize, j: usize) -> u8 {
        assert!(
            j < self.seq_len,
            "column {j} out of range for length {}",
            self.seq_len
        );
        let (columns, buckets) = self.row(i);
        match columns.binary_search(&(j as u32)) {
            Ok(k) => buckets[k],
            Err(_) => self.far_bucket(),
        }
    }

    /// Writes the dense bucket tile `[rows.len(), cols.len()]` (row-major) of local rows `rows`
    /// and global columns `cols` into `out`, the far bucket where nothing is stored. Costs
    /// `O(rows.len() * (cols.len() + log nnz_per_row))`: each row's first column `>= cols.start`
    /// is found by binary search.
    ///
    /// # Panics
    /// If `rows` is not within `0..len()`, `cols` not within `0..seq_len()`, or `out.len() !=
    /// rows.len() * cols.len()`.
    pub fn fill_tile(&self, rows: Range<usize>, cols: Range<usize>, out: &mut [u8]) {
        assert!(
            rows.start <= rows.end && rows.end <= self.len(),
            "rows {rows:?} not within 0..{}",
            self.len()
        );
        assert!(
            cols.start <= cols.end && cols.end <= self.seq_len,
            "columns {cols:?} not within 0..{}",
            self.seq_len
        );
        let width = cols.len();
        assert_eq!(
            out.len(),
            rows.len() * width,
            "tile buffer of {} bytes for a {} x {width} tile",
            out.len(),
            rows.len()
        );
        out.fill(self.far_bucket());
        if width == 0 {
            return;
        }
        for (r, out_row) in rows.zip(out.chunks_exact_mut(width)) {
            let (columns, buckets) = self.row(r);
            let start = columns.partition_point(|&c| (c as usize) < cols.start);
            for (&c, &b) in columns[start..].iter().zip(&buckets[start..]) {
                let c = c as usize;
                if c >= cols.end {
                    break;
                }
                out_row[c - cols.start] = b;
            }
        }
    }

    /// The whole block as dense bytes, `[len(), S]` row-major (equal to those rows of the
    /// [`DistanceIndex`] of the sequence).
    pub fn to_dense_rows(&self) -> Vec<u8> {
        let mut out = vec![0; self.dense_bytes()];
        self.fill_tile(0..self.len(), 0..self.seq_len, &mut out);
        out
    }
}

impl Serialize for SparseDistanceIndex {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SparseDistanceIndex::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for SparseDistanceIndex {
    /// Reads the fields and checks every invariant of the type (a malformed file is an error).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SparseDistanceIndex::deserialize(deserializer)?
            .checked()
            .map_err(serde::de::Error::custom)
    }
}

impl SparseDistanceIndex {
    /// `self` if its fields hold the invariants of the type (`truncated_rows` clamped to the
    /// row count), the first broken one otherwise.
    fn checked(self) -> Result<Self, GraphError> {
        let bad = |field: &'static str, value: String, reason: &'static str| {
            Err(GraphError::InvalidConfig {
                field,
                value,
                reason,
            })
        };
        if self.max_distance > super::MAX_DISTANCE_LIMIT {
            return Err(GraphError::MaxDistanceTooLarge {
                max_distance: self.max_distance,
            });
        }
        let Some((&first, _)) = self.row_offsets.split_first() else {
            return bad("row_offsets", "[]".into(), "must hold rows + 1 offsets");
        };
        let rows = self.row_offsets.len() - 1;
        check_rows(&(self.first_row..self.first_row.saturating_add(rows)), self.seq_len)?;
        let nnz = self.columns.len() as u64;
        if first != 0 || self.row_offsets.last() != Some(&nnz) || self.buckets.len() != self.columns.len() {
            return bad(
                "row_offsets",
                format!("{first}..{:?} for {nnz} columns", self.row_offsets.last()),
                "must start at 0 and end at nnz = columns.len() = buckets.len()",
            );
        }
        for (i, w) in self.row_offsets.windows(2).enumerate() {
            if w[0] > w[1] {
                return bad(
                    "row_offsets",
                    format!("row {i}: {}..{}", w[0], w[1]),
                    "must be nondecreasing",
                );
            }
            let (start, end) = (w[0] as usize, w[1] as usize);
            let cols = &self.columns[start..end];
            if cols.windows(2).any(|c| c[0] >= c[1])
                || cols.last().is_some_and(|&c| c as usize >= self.seq_len)
            {
                return bad(
                    "columns",
                    format!("row {i}"),
                    "must be strictly ascending and below seq_len within each row",
                );
            }
        }
        if let Some(b) = self.buckets.iter().find(|&&b| b > self.max_distance) {
            return bad(
                "buckets",
                b.to_string(),
                "stored buckets must be at most max_distance",
            );
        }
        Ok(Self {
            truncated_rows: self.truncated_rows.min(rows),
            ..self
        })
    }
}

#[cfg(test)]
mod tests;

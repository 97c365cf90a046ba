//! [`Graph`]: an immutable compressed-sparse-row (CSR) adjacency structure with `u32` node ids.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::GraphError;

/// What to do with self loops (arcs `v -> v`) when building a [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum SelfLoops {
    /// Keep the self loops present in the edge list (deduplicated), add none.
    Keep,
    /// Drop every self loop (default).
    #[default]
    Remove,
    /// Give every node exactly one self loop.
    Add,
}

/// How a [`Graph`] is built from an edge list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphOptions {
    /// Store both `u -> v` and `v -> u` for every input pair. Default: `true`.
    pub symmetrize: bool,
    /// Self-loop policy. Default: [`SelfLoops::Remove`].
    pub self_loops: SelfLoops,
}

impl Default for GraphOptions {
    fn default() -> Self {
        Self {
            symmetrize: true,
            self_loops: SelfLoops::Remove,
        }
    }
}

/// A directed graph in CSR form: for node `v`, its out-neighbours are
/// `targets[offsets[v]..offsets[v + 1]]`, sorted ascending and without duplicates.
///
/// Built symmetrized (the default), every arc has its reverse and the graph is effectively
/// undirected. The in/out degrees of the edge list as given are kept alongside, since
/// symmetrization erases direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    offsets: Vec<usize>,
    targets: Vec<u32>,
    in_degrees: Vec<u32>,
    out_degrees: Vec<u32>,
    /// How the graph was built (symmetrized or not, the self-loop policy).
    options: GraphOptions,
}

impl Graph {
    /// Builds a graph on `num_nodes` nodes from `(src, dst)` pairs.
    ///
    /// Duplicate arcs are merged; self loops follow `options.self_loops`; with
    /// `options.symmetrize` each pair also yields its reverse arc. Runs in `O(N + E log d)`
    /// (counting sort, then a parallel per-row sort).
    ///
    /// # Errors
    /// [`GraphError::TooManyNodes`] if `num_nodes > u32::MAX`, [`GraphError::NodeOutOfRange`] if an
    /// endpoint is `>= num_nodes`.
    pub fn from_edges(
        num_nodes: usize,
        edges: &[(u32, u32)],
        options: &GraphOptions,
    ) -> Result<Graph, GraphError> {
        if num_nodes > u32::MAX as usize {
            return Err(GraphError::TooManyNodes { num_nodes });
        }
        if let Some((position, &(s, d))) = edges
            .par_iter()
            .enumerate()
            .find_first(|(_, (s, d))| *s as usize >= num_nodes || *d as usize >= num_nodes)
        {
            let node = if s as usize >= num_nodes { s } else { d };
            return Err(GraphError::NodeOutOfRange {
                node: u64::from(node),
                num_nodes,
                position,
            });
        }

        let mut in_degrees = vec![0u32; num_nodes];
        let mut out_degrees = vec![0u32; num_nodes];
        for &(s, d) in edges {
            out_degrees[s as usize] = out_degrees[s as usize].saturating_add(1);
            in_degrees[d as usize] = in_degrees[d as usize].saturating_add(1);
        }

        let keep_loops = options.self_loops == SelfLoops::Keep;
        let add_loops = options.self_loops == SelfLoops::Add;
        // Row lengths before deduplication.
        let mut counts = vec![0usize; num_nodes + 1];
        for &(s, d) in edges {
            if s == d && !keep_loops {
                continue;
            }
            counts[s as usize] += 1;
            if options.symmetrize && s != d {
                counts[d as usize] += 1;
            }
        }
        if add_loops {
            for c in counts.iter_mut().take(num_nodes) {
                *c += 1;
            }
        }
        let mut offsets = vec![0usize; num_nodes + 1];
        for v in 0..num_nodes {
            offsets[v + 1] = offsets[v] + counts[v];
        }
        let total = offsets[num_nodes];
        let mut targets = vec![0u32; total];
        let mut cursor: Vec<usize> = offsets[..num_nodes].to_vec();
        let mut push = |s: u32, d: u32, targets: &mut Vec<u32>| {
            let c = &mut cursor[s as usize];
            targets[*c] = d;
            *c += 1;
        };
        for &(s, d) in edges {
            if s == d && !keep_loops {
                continue;
            }
            push(s, d, &mut targets);
            if options.symmetrize && s != d {
                push(d, s, &mut targets);
            }
        }
        if add_loops {
            for v in 0..num_nodes as u32 {
                push(v, v, &mut targets);
            }
        }

        // Sort and deduplicate every row in parallel, then compact.
        let mut rows: Vec<&mut [u32]> = Vec::with_capacity(num_nodes);
        let mut rest = targets.as_mut_slice();
        for v in 0..num_nodes {
            let (row, tail) = rest.split_at_mut(offsets[v + 1] - offsets[v]);
            rows.push(row);
            rest = tail;
        }
        let lengths: Vec<usize> = rows
            .into_par_iter()
            .map(|row| {
                row.sort_unstable();
                dedup_sorted(row)
            })
            .collect();
        let mut write = 0usize;
        let mut new_offsets = vec![0usize; num_nodes + 1];
        for v in 0..num_nodes {
            let start = offsets[v];
            let len = lengths[v];
            if write != start {
                targets.copy_within(start..start + len, write);
            }
            write += len;
            new_offsets[v + 1] = write;
        }
        targets.truncate(write);
        targets.shrink_to_fit();

        Ok(Graph {
            offsets: new_offsets,
            targets,
            in_degrees,
            out_degrees,
            options: *options,
        })
    }

    /// Reassembles a graph from its parts (used by the binary cache), checking every invariant
    /// so that a damaged cache cannot produce a graph that panics later.
    pub(crate) fn from_parts(
        offsets: Vec<usize>,
        targets: Vec<u32>,
        in_degrees: Vec<u32>,
        out_degrees: Vec<u32>,
        options: GraphOptions,
    ) -> Result<Graph, &'static str> {
        let n = in_degrees.len();
        if out_degrees.len() != n || offsets.len() != n + 1 || n > u32::MAX as usize {
            return Err("inconsistent node counts");
        }
        if offsets[0] != 0 || offsets[n] != targets.len() {
            return Err("offsets do not span the targets");
        }
        for v in 0..n {
            let (a, b) = (offsets[v], offsets[v + 1]);
            if a > b {
                return Err("offsets not monotone");
            }
            let row = &targets[a..b];
            if row.windows(2).any(|w| w[0] >= w[1]) || row.last().is_some_and(|&t| t as usize >= n)
            {
                return Err("row not sorted, not deduplicated or out of range");
            }
        }
        Ok(Graph {
            offsets,
            targets,
            in_degrees,
            out_degrees,
            options,
        })
    }

    /// Number of nodes `N`.
    pub fn num_nodes(&self) -> usize {
        self.in_degrees.len()
    }

    /// Number of stored directed arcs (after symmetrization, deduplication and the self-loop
    /// policy). A symmetrized graph stores each undirected edge twice.
    pub fn num_edges(&self) -> usize {
        self.targets.len()
    }

    /// Number of `(src, dst)` pairs in the edge list the graph was built from (the sum of
    /// [`Graph::out_degrees`], saturating per node at `u32::MAX`).
    pub fn num_input_edges(&self) -> u64 {
        self.out_degrees.iter().map(|&d| u64::from(d)).sum()
    }

    /// Whether the graph was built symmetrized (every arc has its reverse).
    pub fn is_symmetric(&self) -> bool {
        self.options.symmetrize
    }

    /// The self-loop policy the graph was built with.
    pub fn self_loops(&self) -> SelfLoops {
        self.options.self_loops
    }

    /// Out-neighbours of `node`, sorted ascending, deduplicated.
    ///
    /// # Panics
    /// If `node >= num_nodes()`.
    pub fn neighbors(&self, node: u32) -> &[u32] {
        let v = node as usize;
        &self.targets[self.offsets[v]..self.offsets[v + 1]]
    }

    /// Number of stored out-arcs of `node` (its degree in the stored graph).
    ///
    /// # Panics
    /// If `node >= num_nodes()`.
    pub fn degree(&self, node: u32) -> usize {
        let v = node as usize;
        self.offsets[v + 1] - self.offsets[v]
    }

    /// Whether the arc `src -> dst` is stored (binary search, `O(log d)`).
    ///
    /// # Panics
    /// If `src >= num_nodes()`.
    pub fn has_edge(&self, src: u32, dst: u32) -> bool {
        self.neighbors(src).binary_search(&dst).is_ok()
    }

    /// In-degree of every node in the ORIGINAL edge list (before symmetrization and
    /// deduplication; every input pair counts, self loops included). Shape `[N]`.
    pub fn in_degrees(&self) -> &[u32] {
        &self.in_degrees
    }

    /// Out-degree of every node in the ORIGINAL edge list (see [`Graph::in_degrees`]). Shape `[N]`.
    pub fn out_degrees(&self) -> &[u32] {
        &self.out_degrees
    }

    /// CSR row offsets, shape `[N + 1]`: the arcs of node `v` are `targets()[offsets()[v]..offsets()[v + 1]]`.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// CSR arc targets, shape `[num_edges()]`.
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }

    /// Iterates over all stored arcs `(src, dst)` in CSR order.
    pub fn arcs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.num_nodes() as u32)
            .flat_map(move |v| self.neighbors(v).iter().map(move |&t| (v, t)))
    }
}

/// Removes consecutive duplicates from a sorted slice in place, returning the new length.
fn dedup_sorted(row: &mut [u32]) -> usize {
    if row.is_empty() {
        return 0;
    }
    let mut w = 1;
    for r in 1..row.len() {
        if row[r] != row[w - 1] {
            row[w] = row[r];
            w += 1;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(symmetrize: bool, self_loops: SelfLoops) -> GraphOptions {
        GraphOptions {
            symmetrize,
            self_loops,
        }
    }

    const EDGES: &[(u32, u32)] = &[(0, 1), (1, 2), (0, 1), (2, 2), (3, 0), (1, 0)];

    #[test]
    fn directed_keeps_direction_and_dedups() {
        let g = Graph::from_edges(5, EDGES, &opts(false, SelfLoops::Remove)).unwrap();
        assert_eq!(g.neighbors(0), &[1]);
        assert_eq!(g.neighbors(1), &[0, 2]);
        assert_eq!(g.neighbors(2), &[] as &[u32]);
        assert_eq!(g.neighbors(3), &[0]);
        assert_eq!(g.neighbors(4), &[] as &[u32]);
        assert_eq!(g.num_edges(), 4);
        assert!(!g.is_symmetric());
    }

    #[test]
    fn symmetrize_adds_reverse_arcs() {
        let g = Graph::from_edges(5, EDGES, &GraphOptions::default()).unwrap();
        assert_eq!(g.neighbors(0), &[1, 3]);
        assert_eq!(g.neighbors(1), &[0, 2]);
        assert_eq!(g.neighbors(2), &[1]);
        assert_eq!(g.neighbors(3), &[0]);
        assert_eq!(g.num_edges(), 6);
        assert!(g.is_symmetric());
        for (s, d) in g.arcs() {
            assert!(g.has_edge(d, s), "missing reverse of {s}->{d}");
        }
    }

    #[test]
    fn self_loop_policies() {
        let keep = Graph::from_edges(5, EDGES, &opts(true, SelfLoops::Keep)).unwrap();
        assert_eq!(keep.neighbors(2), &[1, 2]);
        assert_eq!(keep.neighbors(0), &[1, 3]);
        let add = Graph::from_edges(5, EDGES, &opts(true, SelfLoops::Add)).unwrap();
        for v in 0..5 {
            assert_eq!(add.neighbors(v).iter().filter(|&&t| t == v).count(), 1);
        }
        assert_eq!(add.neighbors(2), &[1, 2]);
        assert_eq!(add.neighbors(4), &[4]);
        assert_eq!(add.num_edges(), 6 + 5);
        let remove = Graph::from_edges(5, EDGES, &opts(false, SelfLoops::Remove)).unwrap();
        assert!(remove.arcs().all(|(s, d)| s != d));
    }

    #[test]
    fn degrees_are_of_the_original_list() {
        let g = Graph::from_edges(5, EDGES, &GraphOptions::default()).unwrap();
        assert_eq!(g.out_degrees(), &[2, 2, 1, 1, 0]);
        assert_eq!(g.in_degrees(), &[2, 2, 2, 0, 0]);
        assert_eq!(g.num_input_edges(), EDGES.len() as u64);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let err = Graph::from_edges(3, &[(0, 1), (1, 3)], &GraphOptions::default()).unwrap_err();
        match err {
            GraphError::NodeOutOfRange {
                node,
                num_nodes,
                position,
            } => assert_eq!((node, num_nodes, position), (3, 3, 1)),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn empty_graph() {
        let g = Graph::from_edges(0, &[], &GraphOptions::default()).unwrap();
        assert_eq!((g.num_nodes(), g.num_edges()), (0, 0));
        assert_eq!(g.offsets(), &[0]);
    }

    #[test]
    fn from_parts_rejects_bad_rows() {
        let g = Graph::from_edges(4, EDGES, &GraphOptions::default()).unwrap();
        let ok = Graph::from_parts(
            g.offsets.clone(),
            g.targets.clone(),
            g.in_degrees.clone(),
            g.out_degrees.clone(),
            g.options,
        );
        assert_eq!(ok.as_ref(), Ok(&g));
        let mut bad = g.targets.clone();
        bad[0] = 99;
        assert!(
            Graph::from_parts(
                g.offsets.clone(),
                bad,
                g.in_degrees.clone(),
                g.out_degrees.clone(),
                g.options
            )
            .is_err()
        );
    }
}

//! [`EdgePathIndex`]: one shortest path per pair of a sequence, as the arcs it follows, for
//! Graphormer's edge encoding.

use std::collections::HashMap;

use super::bfs::prepare_sequence;
use super::{DistanceScope, DistanceWorkspace, MAX_DISTANCE_LIMIT};
use crate::error::GraphError;
use crate::graph::Graph;

/// The arc id of a hop past the end of a path (and of every hop of a pair without one).
pub const NO_ARC: usize = usize::MAX;

/// One shortest path per ordered pair of a sequence, stored as the arcs it follows (arc ids are
/// positions in the graph's CSR arrays, the rows of [`EdgeFeatures`](crate::EdgeFeatures)):
/// `[S, S, max_distance]`, row-major, hops past a path's end read [`NO_ARC`].
///
/// The pair `(i, j)` with `1 <= d(i, j) <= max_distance` holds `d(i, j)` arcs, from `nodes[i]`
/// to `nodes[j]`; the diagonal, farther pairs and unreachable ones hold none. Distances and
/// reachability follow the same rules as [`DistanceIndex`](super::DistanceIndex) for the same
/// `scope` (exact, with no BFS budget).
///
/// Which shortest path: the one of the breadth-first tree from `nodes[i]` that visits
/// neighbours in ascending id order, i.e. every node's parent is the first node of the previous
/// level (in discovery order) with an arc to it. The choice is deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgePathIndex {
    seq_len: usize,
    max_distance: u8,
    arcs: Vec<usize>,
}

impl EdgePathIndex {
    /// The paths of the sequence `nodes` in `graph`, within `max_distance` hops.
    ///
    /// # Errors
    /// [`GraphError::MaxDistanceTooLarge`] if `max_distance > 254`,
    /// [`GraphError::NodeOutOfRange`] / [`GraphError::DuplicateNode`] for a bad node list.
    pub fn new(graph: &Graph, nodes: &[u32], max_distance: u8, scope: DistanceScope) -> Result<Self, GraphError> {
        if max_distance > MAX_DISTANCE_LIMIT {
            return Err(GraphError::MaxDistanceTooLarge { max_distance });
        }
        let mut ws = DistanceWorkspace::new(graph.num_nodes());
        prepare_sequence(graph, nodes, &mut ws)?;
        let (s, hops) = (nodes.len(), usize::from(max_distance));
        let mut arcs = vec![NO_ARC; s * s * hops];
        let mut tree = BfsTree::default();
        for (i, &source) in nodes.iter().enumerate() {
            tree.grow(graph, source, max_distance, scope, &mut ws, s - 1);
            for &(position, node, depth) in &tree.members {
                let pair = &mut arcs[(i * s + position) * hops..][..hops];
                tree.path_to(node, &mut pair[..usize::from(depth)]);
            }
        }
        Ok(Self {
            seq_len: s,
            max_distance,
            arcs,
        })
    }

    /// The number of positions `S` (the sequence's nodes) and of hops stored per pair.
    pub fn shape(&self) -> (usize, u8) {
        (self.seq_len, self.max_distance)
    }

    /// The arcs of the path from position `i` to position `j`, in order (empty when the pair
    /// has none).
    ///
    /// # Panics
    /// If `i` or `j` is not below the sequence length.
    pub fn path(&self, i: usize, j: usize) -> &[usize] {
        assert!(
            i < self.seq_len && j < self.seq_len,
            "pair ({i}, {j}) outside a sequence of {}",
            self.seq_len
        );
        let hops = usize::from(self.max_distance);
        let pair = &self.arcs[(i * self.seq_len + j) * hops..][..hops];
        let len = pair.iter().position(|&arc| arc == NO_ARC).unwrap_or(hops);
        &pair[..len]
    }

    /// The `[S, S, max_distance]` row-major arc ids ([`NO_ARC`] past a path's end).
    pub fn as_arcs(&self) -> &[usize] {
        &self.arcs
    }
}

/// The breadth-first tree of one source: every reached node's parent arc, and the sequence
/// members reached.
#[derive(Debug, Default)]
struct BfsTree {
    /// Reached node -> (parent node, arc from the parent).
    parent: HashMap<u32, (u32, usize)>,
    /// `(position, node, depth)` of every other member reached, in discovery order.
    members: Vec<(usize, u32, u8)>,
    /// The source of the current tree.
    source: u32,
}

impl BfsTree {
    /// Grows the tree of `source` to depth `max_distance`, through the nodes `scope` allows,
    /// stopping once `targets` other members of the sequence registered in `ws` are reached.
    fn grow(
        &mut self,
        graph: &Graph,
        source: u32,
        max_distance: u8,
        scope: DistanceScope,
        ws: &mut DistanceWorkspace,
        targets: usize,
    ) {
        self.parent.clear();
        self.members.clear();
        self.source = source;
        let mut level = vec![source];
        ws.visited.clear();
        ws.visited.insert(source);
        for depth in 1..=max_distance {
            if self.members.len() == targets || level.is_empty() {
                return;
            }
            let mut next = Vec::new();
            for &u in &level {
                let first_arc = graph.offsets()[u as usize];
                for (k, &w) in graph.neighbors(u).iter().enumerate() {
                    if ws.visited.contains(w) {
                        continue;
                    }
                    let position = ws.position_of(w);
                    // a node outside the sequence only helps as a path's inner node
                    if position.is_none() && (depth == max_distance || scope == DistanceScope::Induced) {
                        continue;
                    }
                    ws.visited.insert(w);
                    self.parent.insert(w, (u, first_arc + k));
                    if let Some(position) = position {
                        self.members.push((position, w, depth));
                    }
                    next.push(w);
                }
            }
            level = next;
        }
    }

    /// Writes the arcs from the source to `node` into `hops` (as long as its depth), in order.
    fn path_to(&self, mut node: u32, hops: &mut [usize]) {
        for hop in hops.iter_mut().rev() {
            let Some(&(parent, arc)) = self.parent.get(&node) else {
                return;
            };
            *hop = arc;
            node = parent;
        }
        debug_assert_eq!(node, self.source, "a path of the tree ends at its source");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::DistanceIndex;
    use crate::graph::GraphOptions;

    /// The `(src, dst)` of arc `arc` of `graph`.
    fn endpoints(graph: &Graph, arc: usize) -> (u32, u32) {
        let src = graph.offsets().partition_point(|&offset| offset <= arc) - 1;
        (src as u32, graph.targets()[arc])
    }

    #[test]
    fn a_tree_has_its_unique_shortest_paths() {
        // a tree: 0-1, 1-2, 2-3, 1-4, 4-5; sequence in a scrambled order, node 3 left out
        let edges = [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5)];
        let graph = Graph::from_edges(6, &edges, &GraphOptions::default()).unwrap();
        let nodes = [5, 0, 2, 4];
        let paths = EdgePathIndex::new(&graph, &nodes, 3, DistanceScope::Graph).unwrap();
        let walk = |i: usize, j: usize| -> Vec<(u32, u32)> {
            paths.path(i, j).iter().map(|&arc| endpoints(&graph, arc)).collect()
        };
        assert_eq!(walk(1, 2), [(0, 1), (1, 2)]);
        assert_eq!(walk(2, 1), [(2, 1), (1, 0)]);
        assert_eq!(walk(0, 1), [(5, 4), (4, 1), (1, 0)]);
        assert_eq!(walk(3, 2), [(4, 1), (1, 2)]);
        // 5 -> 2 is 3 hops, within max_distance; the diagonal holds none
        assert_eq!(walk(0, 2), [(5, 4), (4, 1), (1, 2)]);
        assert!(walk(2, 2).is_empty());
        // max_distance 2: the 3-hop pairs hold nothing
        let near = EdgePathIndex::new(&graph, &nodes, 2, DistanceScope::Graph).unwrap();
        assert!(near.path(0, 1).is_empty() && near.path(0, 2).is_empty());
        assert_eq!(near.path(1, 2), paths.path(1, 2));
        // induced: 0-2 runs through 1, which is not in the sequence
        let induced = EdgePathIndex::new(&graph, &nodes, 3, DistanceScope::Induced).unwrap();
        assert!(induced.path(1, 2).is_empty());
        assert_eq!(induced.path(3, 0).len(), 1);
    }

    #[test]
    fn paths_are_walks_as_long_as_the_distances_on_a_random_graph() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as u32
        };
        let edges: Vec<(u32, u32)> = (0..120).map(|_| (next(60), next(60))).collect();
        let graph = Graph::from_edges(60, &edges, &GraphOptions::default()).unwrap();
        let nodes: Vec<u32> = (0..60).step_by(3).collect();
        for scope in [DistanceScope::Graph, DistanceScope::Induced] {
            let paths = EdgePathIndex::new(&graph, &nodes, 4, scope).unwrap();
            let distances = DistanceIndex::new(&graph, &nodes, 4, scope).unwrap();
            let s = nodes.len();
            for i in 0..s {
                for j in 0..s {
                    let path = paths.path(i, j);
                    let bucket = distances.as_bytes()[i * s + j];
                    let expected = if bucket > 4 { 0 } else { usize::from(bucket) };
                    assert_eq!(path.len(), expected, "pair ({i}, {j}) in {scope:?}");
                    let mut at = nodes[i];
                    for &arc in path {
                        let (src, dst) = endpoints(&graph, arc);
                        assert_eq!(src, at, "a walk");
                        at = dst;
                    }
                    if !path.is_empty() {
                        assert_eq!(at, nodes[j]);
                    }
                }
            }
        }
        assert!(matches!(
            EdgePathIndex::new(&graph, &[1, 1], 2, DistanceScope::Graph),
            Err(GraphError::DuplicateNode { .. })
        ));
    }
}

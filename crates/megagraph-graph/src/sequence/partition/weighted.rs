//! [`WeightedGraph`]: the undirected graph with node and edge weights that every level of the
//! multilevel bisection works on.

use crate::graph::Graph;

/// An undirected graph with node and edge weights, local ids `0..n`.
pub(super) struct WeightedGraph {
    /// Row `v` is `offsets[v]..offsets[v + 1]` of `targets` and `edge_weights`, `[n + 1]`.
    pub(super) offsets: Vec<usize>,
    /// Neighbour of every arc, `[arcs]`.
    pub(super) targets: Vec<u32>,
    /// Weight of every arc, `[arcs]`.
    pub(super) edge_weights: Vec<u32>,
    /// Weight of every node, `[n]`.
    pub(super) node_weights: Vec<u32>,
    /// Sum of `node_weights`.
    pub(super) total_weight: usize,
}

impl WeightedGraph {
    /// Number of nodes.
    pub(super) fn len(&self) -> usize {
        self.node_weights.len()
    }

    /// `(neighbour, edge weight)` pairs of `v`.
    pub(super) fn edges(&self, v: usize) -> impl Iterator<Item = (usize, i64)> + '_ {
        let r = self.offsets[v]..self.offsets[v + 1];
        self.targets[r.clone()]
            .iter()
            .zip(&self.edge_weights[r])
            .map(|(&t, &w)| (t as usize, i64::from(w)))
    }

    /// Whether `v` has no edges.
    pub(super) fn is_isolated(&self, v: usize) -> bool {
        self.offsets[v] == self.offsets[v + 1]
    }

    /// The largest node weight (0 for no nodes).
    pub(super) fn max_node_weight(&self) -> usize {
        self.node_weights.iter().copied().max().unwrap_or(0) as usize
    }

    /// `graph` with unit weights, self loops dropped (its arcs are taken as undirected edges).
    pub(super) fn from_graph(graph: &Graph) -> WeightedGraph {
        let n = graph.num_nodes();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut targets = Vec::with_capacity(graph.num_edges());
        for v in 0..n as u32 {
            targets.extend(graph.neighbors(v).iter().filter(|&&w| w != v));
            offsets.push(targets.len());
        }
        WeightedGraph {
            offsets,
            edge_weights: vec![1; targets.len()],
            targets,
            node_weights: vec![1; n],
            total_weight: n,
        }
    }

    /// The subgraph induced by the nodes on side `which`, renumbered in order.
    pub(super) fn induced(&self, side: &[u8], which: u8) -> WeightedGraph {
        let n = self.len();
        let mut new_id = vec![u32::MAX; n];
        let mut count = 0u32;
        for v in 0..n {
            if side[v] == which {
                new_id[v] = count;
                count += 1;
            }
        }
        let mut offsets = Vec::with_capacity(count as usize + 1);
        offsets.push(0);
        let mut targets = Vec::new();
        let mut edge_weights = Vec::new();
        let mut node_weights = Vec::with_capacity(count as usize);
        for v in (0..n).filter(|&v| side[v] == which) {
            for (w, ew) in self.edges(v) {
                if side[w] == which {
                    targets.push(new_id[w]);
                    edge_weights.push(ew as u32);
                }
            }
            offsets.push(targets.len());
            node_weights.push(self.node_weights[v]);
        }
        let total_weight = node_weights.iter().map(|&w| w as usize).sum();
        WeightedGraph {
            offsets,
            targets,
            edge_weights,
            node_weights,
            total_weight,
        }
    }
}

//! [`EdgeFeatures`]: dense features of a graph's arcs, for Graphormer's edge encoding.

use crate::error::GraphError;
use crate::graph::Graph;

/// Dense edge features, one row per stored arc of a [`Graph`] in its CSR order (arc `a` is
/// `targets()[a]` in the row of its source), row-major `[num_arcs, dim]`.
///
/// Input edges become arcs as [`Graph::from_edges`] builds them, and their feature rows follow
/// ([`EdgeFeatures::for_arcs`]): an arc takes the row of the FIRST input edge, in edge-list
/// order, that yields it. `(s, d)` yields `s -> d`, and on a symmetrized graph also `d -> s`, so
/// both directions of an undirected edge share its row and a duplicate edge keeps the first
/// row. Self loops the graph dropped drop their rows; arcs no input edge yields (self loops
/// added by [`SelfLoops::Add`](crate::SelfLoops::Add)) read zeros.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeFeatures {
    /// Number of columns (feature dimension).
    pub dim: usize,
    /// `num_arcs * dim` values, row-major: arc `a`'s features are `values[a * dim..(a + 1) * dim]`.
    pub values: Vec<f32>,
}

impl EdgeFeatures {
    /// The features of `graph`'s arcs from those of the input edges it was built from: `edges`
    /// (the edge list given to [`Graph::from_edges`], in its order) and `rows`, row-major
    /// `[edges.len(), dim]`. See the type's docs for which row an arc takes.
    ///
    /// # Errors
    /// [`GraphError::InvalidConfig`] (field `edge_features`) if `rows` does not hold `dim` values
    /// per edge; [`GraphError::NodeOutOfRange`] if an edge has an endpoint outside the graph.
    pub fn for_arcs(graph: &Graph, edges: &[(u32, u32)], dim: usize, rows: &[f32]) -> Result<Self, GraphError> {
        if rows.len() != edges.len() * dim {
            return Err(GraphError::InvalidConfig {
                field: "edge_features",
                value: format!("{} values for {} edges of width {dim}", rows.len(), edges.len()),
                reason: "one row of `dim` values per input edge",
            });
        }
        let num_nodes = graph.num_nodes();
        let offsets = graph.offsets();
        let mut first_edge = vec![usize::MAX; graph.num_edges()];
        let mut claim = |src: u32, dst: u32, edge: usize| {
            if let Ok(k) = graph.neighbors(src).binary_search(&dst) {
                let arc = offsets[src as usize] + k;
                if first_edge[arc] == usize::MAX {
                    first_edge[arc] = edge;
                }
            }
        };
        for (position, &(src, dst)) in edges.iter().enumerate() {
            if src as usize >= num_nodes || dst as usize >= num_nodes {
                return Err(GraphError::NodeOutOfRange {
                    node: u64::from(src.max(dst)),
                    num_nodes,
                    position,
                });
            }
            claim(src, dst, position);
            if graph.is_symmetric() {
                claim(dst, src, position);
            }
        }
        let mut values = vec![0.0f32; first_edge.len() * dim];
        for (arc, &edge) in first_edge.iter().enumerate() {
            if edge != usize::MAX {
                values[arc * dim..(arc + 1) * dim].copy_from_slice(&rows[edge * dim..(edge + 1) * dim]);
            }
        }
        Ok(Self { dim, values })
    }

    /// Number of rows (arcs).
    pub fn num_arcs(&self) -> usize {
        self.values.len().checked_div(self.dim).unwrap_or(0)
    }

    /// The feature row of the arc `src -> dst` of `graph` (the graph these features were built
    /// for), or `None` if the graph has no such arc.
    ///
    /// # Panics
    /// If `src` is not a node of `graph`.
    pub fn of_arc(&self, graph: &Graph, src: u32, dst: u32) -> Option<&[f32]> {
        let k = graph.neighbors(src).binary_search(&dst).ok()?;
        Some(self.row(graph.offsets()[src as usize] + k))
    }

    /// The feature row of `arc`, shape `[dim]`.
    ///
    /// # Panics
    /// If `arc >= num_arcs()`.
    pub fn row(&self, arc: usize) -> &[f32] {
        &self.values[arc * self.dim..(arc + 1) * self.dim]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphOptions, SelfLoops};

    /// The row of arc `src -> dst`, which must exist.
    fn row_of(features: &EdgeFeatures, graph: &Graph, src: u32, dst: u32) -> Vec<f32> {
        features.of_arc(graph, src, dst).expect("an arc").to_vec()
    }

    #[test]
    fn arcs_take_the_row_of_the_first_edge_that_yields_them() {
        // 0-1 twice (second row ignored), 1-2 given as 2->1, a self loop 2-2 (dropped)
        let edges = [(0, 1), (2, 1), (1, 0), (2, 2)];
        let rows = [1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0];
        let graph = Graph::from_edges(3, &edges, &GraphOptions::default()).unwrap();
        let features = EdgeFeatures::for_arcs(&graph, &edges, 2, &rows).unwrap();
        assert_eq!(features.num_arcs(), 4);
        assert_eq!(row_of(&features, &graph, 0, 1), [1.0, 10.0]);
        assert_eq!(row_of(&features, &graph, 1, 0), [1.0, 10.0]);
        assert_eq!(row_of(&features, &graph, 1, 2), [2.0, 20.0]);
        assert_eq!(row_of(&features, &graph, 2, 1), [2.0, 20.0]);
        // directed, with added self loops: 1 -> 0 is its own edge, loops read zeros
        let options = GraphOptions {
            symmetrize: false,
            self_loops: SelfLoops::Add,
        };
        let graph = Graph::from_edges(3, &edges, &options).unwrap();
        let features = EdgeFeatures::for_arcs(&graph, &edges, 2, &rows).unwrap();
        assert_eq!(row_of(&features, &graph, 1, 0), [3.0, 30.0]);
        assert_eq!(row_of(&features, &graph, 0, 0), [0.0, 0.0]);
        assert!(matches!(
            EdgeFeatures::for_arcs(&graph, &edges, 3, &rows),
            Err(GraphError::InvalidConfig {
                field: "edge_features",
                ..
            })
        ));
    }
}

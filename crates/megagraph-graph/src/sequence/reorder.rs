//! [`cluster_order`]: TorchGT's cluster-aware reordering of a sequence, so that the nodes of each
//! cluster of its induced subgraph sit next to each other and the sequence's edges gather in
//! diagonal blocks.

use crate::error::GraphError;
use crate::graph::{Graph, GraphOptions};

use super::{SequenceStrategy, node_sequences};

/// The members of a sequence reordered cluster by cluster: the sequence's induced subgraph is
/// partitioned by the locality partitioner ([`SequenceStrategy::Locality`]) into `clusters`
/// parts of at most `ceil(len / clusters)` nodes, and the parts are concatenated (each part's
/// nodes ascending). A permutation of `members`, deterministic in `seed`; `clusters` of 0 or 1
/// keeps the members' order.
///
/// # Errors
/// [`GraphError::NodeOutOfRange`] for a member that is not a node of `graph`, and
/// [`GraphError::DuplicateNode`] for a member given twice.
pub fn cluster_order(graph: &Graph, members: &[u32], clusters: usize, seed: u64) -> Result<Vec<u32>, GraphError> {
    Ok(cluster_parts(graph, members, clusters, seed)?.into_iter().flatten().collect())
}

/// The clusters of [`cluster_order`], each a run of its members in order: their concatenation
/// is `cluster_order(graph, members, clusters, seed)` and their lengths are the cluster sizes
/// [`reform_edges`](super::reform_edges) needs. One cluster (the members as given) when
/// `clusters` is 0 or 1; none for no members.
///
/// # Errors
/// As [`cluster_order`].
pub fn cluster_parts(graph: &Graph, members: &[u32], clusters: usize, seed: u64) -> Result<Vec<Vec<u32>>, GraphError> {
    let num_nodes = graph.num_nodes();
    let mut local = std::collections::HashMap::with_capacity(members.len());
    for (position, &node) in members.iter().enumerate() {
        if node as usize >= num_nodes {
            return Err(GraphError::NodeOutOfRange { node: u64::from(node), num_nodes, position });
        }
        if let Some(first) = local.insert(node, position as u32) {
            return Err(GraphError::DuplicateNode { node, first: first as usize, second: position });
        }
    }
    if members.is_empty() {
        return Ok(Vec::new());
    }
    if clusters <= 1 || members.len() <= 1 {
        return Ok(vec![members.to_vec()]);
    }
    let edges: Vec<(u32, u32)> = members
        .iter()
        .enumerate()
        .flat_map(|(u, &node)| {
            let local = &local;
            graph.neighbors(node).iter().filter_map(move |neighbour| local.get(neighbour).map(|&v| (u as u32, v)))
        })
        .collect();
    let induced = Graph::from_edges(members.len(), &edges, &GraphOptions::default())?;
    let part_len = members.len().div_ceil(clusters);
    let parts = node_sequences(&induced, part_len, SequenceStrategy::Locality, seed);
    Ok(parts.into_iter().map(|part| part.into_iter().map(|u| members[u as usize]).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::CsbmConfig;

    /// Edges of the sequence `order` whose ends fall in the same block of `block` positions.
    fn in_diagonal_blocks(graph: &Graph, order: &[u32], block: usize) -> usize {
        let position: std::collections::HashMap<u32, usize> = order.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let position = &position;
        order
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| graph.neighbors(v).iter().filter_map(move |w| position.get(w).map(|&j| (i, j))))
            .filter(|&(i, j)| i / block == j / block)
            .count()
    }

    #[test]
    fn clusters_become_contiguous_blocks_holding_most_edges() {
        let dataset = CsbmConfig { num_nodes: 2000, ..Default::default() }.generate().expect("csbm");
        let graph = &dataset.graph;
        // a sequence of 512 nodes in id order (a CSBM numbers its nodes without regard to classes)
        let members: Vec<u32> = (0..512).map(|i| i * 3 + 1).collect();
        let ordered = cluster_order(graph, &members, 8, 7).expect("valid members");
        let mut sorted = ordered.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, members, "a permutation of the members");
        assert_eq!(ordered, cluster_order(graph, &members, 8, 7).expect("valid"), "deterministic");
        let (before, after) = (in_diagonal_blocks(graph, &members, 64), in_diagonal_blocks(graph, &ordered, 64));
        assert!(after >= 2 * before.max(1), "edges inside the 8 diagonal blocks: {before} in id order, {after} reordered");
        assert_eq!(cluster_order(graph, &members, 1, 7).expect("valid"), members);
        let parts = cluster_parts(graph, &members, 8, 7).expect("valid members");
        assert!(parts.len() == 8 && parts.iter().all(|part| !part.is_empty() && part.len() <= 64), "{:?}", parts.iter().map(Vec::len).collect::<Vec<_>>());
        assert_eq!(parts.concat(), ordered, "the parts concatenated are the order");
        assert!(cluster_parts(graph, &[], 8, 7).expect("valid").is_empty());
    }

    #[test]
    fn bad_members_are_typed_errors() {
        let graph = Graph::from_edges(4, &[(0, 1), (1, 2)], &GraphOptions::default()).expect("graph");
        assert!(matches!(cluster_order(&graph, &[0, 9], 2, 0), Err(GraphError::NodeOutOfRange { node: 9, position: 1, .. })));
        assert!(matches!(cluster_order(&graph, &[2, 1, 2], 2, 0), Err(GraphError::DuplicateNode { node: 2, first: 0, second: 2 })));
    }
}

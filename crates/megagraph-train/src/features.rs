use megagraph_graph::{Graph, NodeFeatures};
use rayon::prelude::*;

/// Scales every feature row to unit L1 norm (rows of zeros stay zero): the usual preprocessing of
/// bag-of-words features such as Cora's, which makes rows with many and few words comparable.
pub fn row_normalized(features: &NodeFeatures) -> NodeFeatures {
    let mut values = features.values.clone();
    values.par_chunks_mut(features.dim.max(1)).for_each(|row| {
        let norm: f32 = row.iter().map(|x| x.abs()).sum();
        if norm > 0.0 {
            row.iter_mut().for_each(|x| *x /= norm);
        }
    });
    NodeFeatures { values, ..features.clone() }
}

/// Appends `hops` rounds of graph propagation to the node features: the result is
/// `[X, ÂX, Â²X, …, Â^hops X]` with `Â = D^-1/2 (A + I) D^-1/2` (the GCN/SGC normalization), so
/// each node's input also describes its neighbourhood. `hops = 0` returns the features unchanged.
///
/// Costs `hops × edges × dim` operations once, before training; the width grows to
/// `(hops + 1) × dim`.
pub fn with_propagated_hops(graph: &Graph, features: &NodeFeatures, hops: usize) -> NodeFeatures {
    if hops == 0 {
        return features.clone();
    }
    let (n, dim) = (features.num_nodes, features.dim);
    let norm: Vec<f32> = (0..n)
        .map(|v| 1.0 / ((graph.neighbors(v as u32).len() + 1) as f32).sqrt())
        .collect();
    let mut rounds = vec![features.values.clone()];
    for _ in 0..hops {
        let previous = rounds.last().map(Vec::as_slice).unwrap_or_default();
        let mut next = vec![0.0f32; n * dim];
        next.par_chunks_mut(dim).enumerate().for_each(|(v, row)| {
            let self_weight = norm[v] * norm[v];
            for (out, x) in row.iter_mut().zip(&previous[v * dim..(v + 1) * dim]) {
                *out = self_weight * x;
            }
            for &u in graph.neighbors(v as u32) {
                let w = norm[v] * norm[u as usize];
                for (out, x) in row.iter_mut().zip(&previous[u as usize * dim..(u as usize + 1) * dim]) {
                    *out += w * x;
                }
            }
        });
        rounds.push(next);
    }
    let width = dim * (hops + 1);
    let mut values = vec![0.0f32; n * width];
    values.par_chunks_mut(width).enumerate().for_each(|(v, row)| {
        for (k, round) in rounds.iter().enumerate() {
            row[k * dim..(k + 1) * dim].copy_from_slice(&round[v * dim..(v + 1) * dim]);
        }
    });
    NodeFeatures {
        num_nodes: n,
        dim: width,
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_graph::GraphOptions;

    #[test]
    fn rows_get_unit_l1_norm_and_zero_rows_stay_zero() {
        let features = NodeFeatures { num_nodes: 3, dim: 2, values: vec![1.0, 3.0, 0.0, 0.0, -2.0, 2.0] };
        assert_eq!(row_normalized(&features).values, vec![0.25, 0.75, 0.0, 0.0, -0.5, 0.5]);
    }

    #[test]
    fn one_hop_on_a_path_matches_the_normalized_adjacency() {
        // Path 0 - 1 - 2, degrees with self loops: 2, 3, 2.
        let graph = Graph::from_edges(3, &[(0, 1), (1, 2)], &GraphOptions::default()).unwrap();
        let features = NodeFeatures {
            num_nodes: 3,
            dim: 1,
            values: vec![1.0, 0.0, 0.0],
        };
        let out = with_propagated_hops(&graph, &features, 1);
        assert_eq!(out.dim, 2);
        let hop = [out.values[1], out.values[3], out.values[5]];
        let expected = [0.5, 1.0 / (2.0f32 * 3.0).sqrt(), 0.0];
        for (a, b) in hop.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{hop:?} vs {expected:?}");
        }
        assert_eq!([out.values[0], out.values[2], out.values[4]], [1.0, 0.0, 0.0]);
        assert_eq!(with_propagated_hops(&graph, &features, 0).values, features.values);
    }
}

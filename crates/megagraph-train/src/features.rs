use megagraph_graph::{Graph, NodeFeatures};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

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

/// How [`propagated_features`] turns rounds of graph propagation into node inputs (`[data]
/// feature_propagation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeaturePropagation {
    /// `[X, ÂX, Â²X, …, Â^k X]`: every round side by side (SGC-style hop tokens).
    #[default]
    Concat,
    /// `[X, Z^K]`: the raw features and APPNP's personalized-PageRank propagation of them
    /// (Gasteiger et al. 2019), `Z⁰ = X`, `Z^{t+1} = (1 − α) Â Z^t + α X`.
    Ppr,
}

/// The node inputs of `propagation` with `hops` rounds: [`with_propagated_hops`] for
/// [`FeaturePropagation::Concat`], [`with_ppr_propagation`] with teleport probability `alpha`
/// for [`FeaturePropagation::Ppr`].
pub fn propagated_features(
    graph: &Graph,
    features: &NodeFeatures,
    propagation: FeaturePropagation,
    hops: usize,
    alpha: f64,
) -> NodeFeatures {
    match propagation {
        FeaturePropagation::Concat => with_propagated_hops(graph, features, hops),
        FeaturePropagation::Ppr => with_ppr_propagation(graph, features, hops, alpha),
    }
}

/// `1 / sqrt(deg(v) + 1)` per node: the symmetric normalization of `A + I`.
pub(crate) fn gcn_norm(graph: &Graph, num_nodes: usize) -> Vec<f32> {
    (0..num_nodes)
        .map(|v| 1.0 / ((graph.neighbors(v as u32).len() + 1) as f32).sqrt())
        .collect()
}

/// `Â Z` for `Â = D^-1/2 (A + I) D^-1/2` (`norm` from [`gcn_norm`]) and `Z` of `dim` columns.
pub(crate) fn normalized_adjacency_times(graph: &Graph, norm: &[f32], previous: &[f32], dim: usize) -> Vec<f32> {
    let mut next = vec![0.0f32; previous.len()];
    next.par_chunks_mut(dim.max(1)).enumerate().for_each(|(v, row)| {
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
    next
}

/// Node features whose rows are the rows of `parts` side by side, each part `dim` wide.
fn side_by_side(parts: &[Vec<f32>], num_nodes: usize, dim: usize) -> NodeFeatures {
    let width = dim * parts.len();
    let mut values = vec![0.0f32; num_nodes * width];
    values.par_chunks_mut(width.max(1)).enumerate().for_each(|(v, row)| {
        for (k, part) in parts.iter().enumerate() {
            row[k * dim..(k + 1) * dim].copy_from_slice(&part[v * dim..(v + 1) * dim]);
        }
    });
    NodeFeatures {
        num_nodes,
        dim: width,
        values,
    }
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
    let norm = gcn_norm(graph, n);
    let mut rounds = vec![features.values.clone()];
    for _ in 0..hops {
        let previous = rounds.last().map(Vec::as_slice).unwrap_or_default();
        let next = normalized_adjacency_times(graph, &norm, previous, dim);
        rounds.push(next);
    }
    side_by_side(&rounds, n, dim)
}

/// Appends APPNP's personalized-PageRank propagation (Gasteiger et al. 2019) to the node
/// features: the result is `[X, Z^K]` with `Z⁰ = X`, `Z^{t+1} = (1 − α) Â Z^t + α X`,
/// `K = steps`, `α = alpha` and `Â = D^-1/2 (A + I) D^-1/2`. Unrolled,
/// `Z^K = Σ_{k<K} α (1 − α)^k Â^k X + (1 − α)^K Â^K X`: a weighted sum of every hop, which keeps
/// a share `α` of each node's own features however large K is (no over-smoothing).
/// `steps = 0` returns the features unchanged.
///
/// Costs `steps × edges × dim` operations once, before training; the width doubles.
pub fn with_ppr_propagation(graph: &Graph, features: &NodeFeatures, steps: usize, alpha: f64) -> NodeFeatures {
    if steps == 0 {
        return features.clone();
    }
    let (n, dim) = (features.num_nodes, features.dim);
    let norm = gcn_norm(graph, n);
    let (keep, teleport) = ((1.0 - alpha) as f32, alpha as f32);
    let mut z = features.values.clone();
    for _ in 0..steps {
        z = normalized_adjacency_times(graph, &norm, &z, dim);
        z.par_iter_mut()
            .zip(&features.values)
            .for_each(|(out, x)| *out = keep * *out + teleport * x);
    }
    side_by_side(&[features.values.clone(), z], n, dim)
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

    /// `Â` of `graph` as a dense float64 matrix.
    fn dense_normalized_adjacency(graph: &Graph, n: usize) -> Vec<Vec<f64>> {
        let degree: Vec<f64> = (0..n).map(|v| (graph.neighbors(v as u32).len() + 1) as f64).collect();
        let mut a = vec![vec![0.0; n]; n];
        for v in 0..n {
            a[v][v] = 1.0 / degree[v];
            for &u in graph.neighbors(v as u32) {
                a[v][u as usize] = 1.0 / (degree[v] * degree[u as usize]).sqrt();
            }
        }
        a
    }

    #[test]
    fn ppr_propagation_matches_a_dense_float64_appnp() {
        // a triangle with a tail and an isolated node: 0-1, 1-2, 2-0, 2-3, 3-4; 5 alone
        let edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)];
        let graph = Graph::from_edges(6, &edges, &GraphOptions::default()).unwrap();
        let (n, dim) = (6, 2);
        let x: Vec<f64> = (0..n * dim).map(|i| ((i * 7) % 5) as f64 - 1.5).collect();
        let features = NodeFeatures {
            num_nodes: n,
            dim,
            values: x.iter().map(|&v| v as f32).collect(),
        };
        let a = dense_normalized_adjacency(&graph, n);
        for (steps, alpha) in [(1, 0.1), (10, 0.1), (10, 0.2), (3, 1.0)] {
            // Z⁰ = X, Z^{t+1} = (1 − α) Â Z^t + α X, dense and in float64
            let mut z = x.clone();
            for _ in 0..steps {
                let mut next = vec![0.0; n * dim];
                for v in 0..n {
                    for c in 0..dim {
                        let az: f64 = (0..n).map(|u| a[v][u] * z[u * dim + c]).sum();
                        next[v * dim + c] = (1.0 - alpha) * az + alpha * x[v * dim + c];
                    }
                }
                z = next;
            }
            let out = propagated_features(&graph, &features, FeaturePropagation::Ppr, steps, alpha);
            assert_eq!((out.num_nodes, out.dim), (n, 2 * dim));
            for v in 0..n {
                for c in 0..dim {
                    let (raw, smooth) = (out.values[v * 2 * dim + c], out.values[v * 2 * dim + dim + c]);
                    assert_eq!(raw as f64, x[v * dim + c]);
                    let expected = z[v * dim + c];
                    assert!((smooth as f64 - expected).abs() < 1e-5, "K {steps} α {alpha} node {v}: {smooth} vs {expected}");
                }
            }
        }
        // α = 1 keeps the features; α < 1 mixes in the neighbours (so the check above can fail)
        let kept = with_ppr_propagation(&graph, &features, 3, 1.0);
        let mixed = with_ppr_propagation(&graph, &features, 3, 0.1);
        assert_eq!(kept.values[dim..2 * dim], features.values[..dim]);
        assert!((mixed.values[dim] - features.values[0]).abs() > 1e-3);
        assert_eq!(with_ppr_propagation(&graph, &features, 0, 0.1).values, features.values);
    }

    #[test]
    fn concat_propagation_matches_dense_powers_of_the_normalized_adjacency() {
        let edges = [(0, 1), (1, 2), (2, 0), (2, 3)];
        let graph = Graph::from_edges(4, &edges, &GraphOptions::default()).unwrap();
        let x = [1.0, -2.0, 0.5, 3.0];
        let features = NodeFeatures { num_nodes: 4, dim: 1, values: x.iter().map(|&v| v as f32).collect() };
        let a = dense_normalized_adjacency(&graph, 4);
        let out = propagated_features(&graph, &features, FeaturePropagation::Concat, 3, 0.1);
        assert_eq!(out.dim, 4);
        let mut z = x.to_vec();
        for k in 0..4 {
            for v in 0..4 {
                let got = out.values[v * 4 + k] as f64;
                assert!((got - z[v]).abs() < 1e-5, "hop {k} node {v}: {got} vs {}", z[v]);
            }
            z = (0..4).map(|v| (0..4).map(|u| a[v][u] * z[u]).sum()).collect();
        }
    }
}

//! [`InputPropagation`]: GRAND's random propagation (Feng et al. 2020, "Graph Random Neural
//! Network for Semi-Supervised Learning on Graphs") of the encoded node rows, ahead of the
//! Graph Transformer's layers.
//!
//! With DropNode on (`[model] node_dropout`), each forward pass drops whole rows and then
//! averages every row with its neighbourhood up to `steps` hops, so each pass sees a different
//! random view of the graph's features; with the consistency regularization
//! (`[training] consistency_weight`) the views' predictions are pulled together. The input
//! encoder is linear, so propagating its output is propagating the features.

use burn::tensor::{Tensor, backend::Backend};
use megagraph_graph::Graph;

use crate::config::{RunContext, TrainConfig};
use crate::features::gcn_norm;
use crate::prediction_propagation::PropagationEdges;

/// Mixed-order propagation of per-node rows `X`: `(1 / (K + 1)) Σ_{k=0..K} Â^k X` for
/// `K = steps`, with `Â = D^-1/2 (A + I) D^-1/2` the GCN normalization of the whole graph.
///
/// Like [`PredictionPropagation`](crate::PredictionPropagation), a step propagates over the
/// nodes of its batch ([`PropagationEdges`] among them, with the whole graph's weights), so a
/// batch that holds every sequence propagates over the whole graph.
#[derive(Clone, Debug)]
pub struct InputPropagation {
    /// Hops `K`, at least 1.
    pub steps: usize,
    /// `1 / sqrt(deg(v) + 1)` of every node of the graph.
    norm: Vec<f32>,
}

impl InputPropagation {
    /// The propagation `config` asks for (`[model] input_propagation_steps`) on `graph`:
    /// `None` when it is off or the run is parallel (where the configuration is refused).
    pub fn from_config(config: &TrainConfig, run: RunContext, graph: &Graph) -> Option<Self> {
        let steps = config.model.input_propagation_steps;
        (steps > 0 && !run.parallel).then(|| Self::new(steps, graph))
    }

    /// `steps` hops over `graph`.
    pub fn new(steps: usize, graph: &Graph) -> Self {
        Self {
            steps,
            norm: gcn_norm(graph, graph.num_nodes()),
        }
    }

    /// The edges of `Â` among `nodes` (the node at each position, `None` for padding).
    pub fn edges(&self, graph: &Graph, nodes: &[Option<u32>]) -> PropagationEdges {
        PropagationEdges::among(graph, &self.norm, nodes)
    }

    /// The mixed-order mean of `rows` (`[positions, channels]`) over `edges` (among those
    /// positions).
    pub fn apply<B: Backend>(&self, rows: Tensor<B, 2>, edges: &PropagationEdges) -> Tensor<B, 2> {
        let edges = edges.tensors(&rows.device());
        let mut sum = rows.clone();
        let mut z = rows;
        for _ in 0..self.steps {
            z = edges.spread(z);
            sum = sum + z.clone();
        }
        sum / (self.steps + 1) as f64
    }

    /// [`apply`](Self::apply) to a batch's rows (`[batch, seq, channels]`) over `edges`, the
    /// edges among its nodes (row-major `[batch, seq]`).
    pub fn apply_to_batch<B: Backend>(&self, rows: Tensor<B, 3>, edges: &PropagationEdges) -> Tensor<B, 3> {
        let [batch, seq, channels] = rows.dims();
        self.apply(rows.reshape([batch * seq, channels]), edges)
            .reshape([batch, seq, channels])
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorData;
    use megagraph_graph::GraphOptions;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    type B = Autodiff<Flex>;

    #[test]
    fn mixed_order_propagation_matches_a_float64_reference_on_a_random_batch() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..5 {
            let (n, c) = (rng.random_range(2..25), rng.random_range(1..6));
            let edges: Vec<(u32, u32)> = (0..2 * n)
                .map(|_| (rng.random_range(0..n as u32), rng.random_range(0..n as u32)))
                .filter(|(u, v)| u != v)
                .collect();
            let graph = Graph::from_edges(n, &edges, &GraphOptions::default()).unwrap_or_else(|e| panic!("{e}"));
            let steps = rng.random_range(1..6);
            let x: Vec<f64> = (0..n * c).map(|_| rng.random_range(-2.0..2.0)).collect();
            // a batch of a random subset of the nodes, in a random order, one padding slot
            let kept: Vec<bool> = (0..n).map(|_| rng.random_bool(0.75)).collect();
            let mut nodes: Vec<Option<u32>> = (0..n as u32).filter(|&v| kept[v as usize]).map(Some).collect();
            nodes.push(None);
            for i in (1..nodes.len()).rev() {
                nodes.swap(i, rng.random_range(0..=i));
            }
            // float64: Â over the kept nodes, then the mean of Â^k x for k = 0..=steps
            let degree: Vec<f64> = (0..n).map(|v| (graph.neighbors(v as u32).len() + 1) as f64).collect();
            let spread = |z: &[f64]| -> Vec<f64> {
                (0..n * c)
                    .map(|i| {
                        let v = i / c;
                        if !kept[v] {
                            return 0.0;
                        }
                        let own = z[i] / degree[v];
                        let others: f64 = graph
                            .neighbors(v as u32)
                            .iter()
                            .filter(|&&u| kept[u as usize])
                            .map(|&u| z[u as usize * c + i % c] / (degree[v] * degree[u as usize]).sqrt())
                            .sum();
                        own + others
                    })
                    .collect()
            };
            let mut z = x.clone();
            let mut sum = x.clone();
            for _ in 0..steps {
                z = spread(&z);
                sum.iter_mut().zip(&z).for_each(|(s, z)| *s += z);
            }
            let rows: Vec<f32> = nodes
                .iter()
                .flat_map(|node| match node {
                    Some(v) => x[*v as usize * c..(*v as usize + 1) * c].iter().map(|&x| x as f32).collect(),
                    None => vec![0.0; c],
                })
                .collect();
            let propagation = InputPropagation::new(steps, &graph);
            let input = Tensor::<B, 3>::from_data(TensorData::new(rows, [1, nodes.len(), c]), &Default::default());
            let out = propagation.apply_to_batch(input, &propagation.edges(&graph, &nodes));
            let out: Vec<f32> = out.into_data().iter::<f32>().collect();
            for (p, node) in nodes.iter().enumerate() {
                for j in 0..c {
                    let want = node.map_or(0.0, |v| sum[v as usize * c + j] / (steps + 1) as f64);
                    let got = f64::from(out[p * c + j]);
                    assert!((got - want).abs() < 1e-4, "seed {seed}: position {p}, channel {j}: {got} vs {want}");
                }
            }
        }
    }
}

//! [`PredictionPropagation`]: APPNP's predict-then-propagate head (Gasteiger et al. 2019,
//! "Predict then Propagate: Graph Neural Networks meet Personalized PageRank") over the
//! Graph Transformer's logits.
//!
//! The loss is taken on the propagated logits, so its gradient reaches every node within
//! `steps` hops of a training node, not the training nodes alone: on graphs with few labels
//! (Cora's public split has 140) this is what lifts a per-node predictor to a graph model's
//! accuracy.

use std::collections::HashMap;

use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData, backend::Backend};
use megagraph_graph::Graph;
use megagraph_models::{FastDropout, FastDropoutConfig};

use crate::config::{RunContext, TrainConfig};
use crate::features::gcn_norm;

/// Personalized-PageRank propagation of per-node logits `H`:
/// `Z⁰ = H`, `Z^{t+1} = (1 − α) Â Z^t + α H` for `steps` rounds, with
/// `Â = D^-1/2 (A + I) D^-1/2` the GCN normalization of the whole graph (self loops included;
/// the normalization feature propagation and Correct & Smooth use).
///
/// A training step propagates over the nodes of its batch: the edges of `Â` whose two ends are
/// both in the batch, with the whole graph's weights (Cluster-GCN's induced subgraph). A batch
/// that holds every sequence is therefore exact APPNP. Evaluation propagates over the whole
/// graph.
///
/// With `edge_dropout` above 0 (APPNP's dropout on the adjacency matrix), every round of a
/// training step drops each entry of `Â` (self loops included) with that probability and scales
/// the others by `1 / (1 − p)`, a fresh mask per round; evaluation propagates with `Â` whole.
#[derive(Clone, Debug)]
pub struct PredictionPropagation {
    /// Rounds `K` of propagation, at least 1.
    pub steps: usize,
    /// Teleport probability `α`, in (0, 1].
    pub alpha: f64,
    /// Dropout on the entries of `Â` in each round while training (off at 0).
    pub edge_dropout: FastDropout,
    /// `1 / sqrt(deg(v) + 1)` of every node of the graph.
    norm: Vec<f32>,
}

/// The edges of `Â` among the positions of a batch: message `source → target` with `weight`,
/// positions indexing the batch's flattened `[batch · seq]` rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PropagationEdges {
    /// Position sending each message.
    pub source: Vec<i64>,
    /// Position receiving it.
    pub target: Vec<i64>,
    /// `Â`'s entry of the pair.
    pub weight: Vec<f32>,
}

impl PredictionPropagation {
    /// The propagation `config` asks for in `run` on `graph` ([`TrainConfig::propagation_steps`]):
    /// `None` when it is off.
    pub fn from_config(config: &TrainConfig, run: RunContext, graph: &Graph) -> Option<Self> {
        let steps = config.propagation_steps(run);
        (steps > 0).then(|| {
            Self::new(steps, config.model.propagation_alpha, graph)
                .with_edge_dropout(config.model.propagation_edge_dropout)
        })
    }

    /// `steps` rounds with teleport `alpha` over `graph`, without edge dropout.
    pub fn new(steps: usize, alpha: f64, graph: &Graph) -> Self {
        Self {
            steps,
            alpha,
            edge_dropout: FastDropoutConfig::new(0.0).init(),
            norm: gcn_norm(graph, graph.num_nodes()),
        }
    }

    /// This propagation with dropout `prob` on the entries of `Â` in each training round.
    ///
    /// # Panics
    ///
    /// If `prob` is not in `[0, 1]` (the trainer validates its configuration first).
    pub fn with_edge_dropout(self, prob: f64) -> Self {
        Self {
            edge_dropout: FastDropoutConfig::new(prob).init(),
            ..self
        }
    }

    /// The edges of `Â` among `nodes` (the node at each position, `None` for padding): a self
    /// loop at every position that holds a node, and both directions of every graph edge whose
    /// ends are both present. A node is expected at most once.
    pub fn edges(&self, graph: &Graph, nodes: &[Option<u32>]) -> PropagationEdges {
        PropagationEdges::among(graph, &self.norm, nodes)
    }

    /// The propagated logits of `logits` (`[positions, classes]`) over `edges` (among those
    /// positions).
    pub fn apply<B: Backend>(&self, logits: Tensor<B, 2>, edges: &PropagationEdges) -> Tensor<B, 2> {
        let edges = edges.tensors(&logits.device());
        let teleport = logits.clone() * self.alpha;
        let mut z = logits;
        for _ in 0..self.steps {
            z = edges.spread_dropped(z, &self.edge_dropout) * (1.0 - self.alpha) + teleport.clone();
        }
        z
    }

    /// [`apply`](Self::apply) to a batch's logits (`[batch, seq, classes]`) over `edges`, the
    /// [`edges`](Self::edges) among its nodes (row-major `[batch, seq]`).
    pub fn apply_to_batch<B: Backend>(&self, logits: Tensor<B, 3>, edges: &PropagationEdges) -> Tensor<B, 3> {
        let [batch, seq, classes] = logits.dims();
        self.apply(logits.reshape([batch * seq, classes]), edges)
            .reshape([batch, seq, classes])
    }
}

impl PropagationEdges {
    /// The edges of `Â` among `nodes` (the node at each position, `None` for padding), `norm`
    /// holding `1 / sqrt(deg(v) + 1)` of every node of `graph` ([`gcn_norm`]): a self loop at
    /// every position that holds a node, and both directions of every graph edge whose ends are
    /// both present. A node is expected at most once.
    pub fn among(graph: &Graph, norm: &[f32], nodes: &[Option<u32>]) -> Self {
        let position: HashMap<u32, usize> = nodes
            .iter()
            .enumerate()
            .filter_map(|(p, node)| node.map(|node| (node, p)))
            .collect();
        let mut edges = PropagationEdges::default();
        for (target, node) in nodes.iter().enumerate() {
            let Some(node) = *node else { continue };
            let own = norm[node as usize];
            edges.push(target, target, own * own);
            for &neighbour in graph.neighbors(node) {
                if let Some(&source) = position.get(&neighbour) {
                    edges.push(source, target, own * norm[neighbour as usize]);
                }
            }
        }
        edges
    }

    /// These edges as tensors on `device`, for [`EdgeTensors::spread`].
    pub(crate) fn tensors<B: Backend>(&self, device: &B::Device) -> EdgeTensors<B> {
        let count = self.source.len();
        EdgeTensors {
            source: Tensor::from_data(TensorData::new(self.source.clone(), [count]), device),
            target: Tensor::from_data(TensorData::new(self.target.clone(), [count]), device),
            weight: Tensor::from_data(TensorData::new(self.weight.clone(), [count, 1]), device),
        }
    }

    fn push(&mut self, source: usize, target: usize, weight: f32) {
        self.source.push(source as i64);
        self.target.push(target as i64);
        self.weight.push(weight);
    }
}

/// [`PropagationEdges`] on a device.
pub(crate) struct EdgeTensors<B: Backend> {
    source: Tensor<B, 1, Int>,
    target: Tensor<B, 1, Int>,
    weight: Tensor<B, 2>,
}

impl<B: Backend> EdgeTensors<B> {
    /// One round `Â Z` of `z` (`[positions, channels]`) over these edges.
    pub(crate) fn spread(&self, z: Tensor<B, 2>) -> Tensor<B, 2> {
        self.spread_weighted(z, self.weight.clone())
    }

    /// [`spread`](Self::spread) with `dropout` applied to the edge weights (a fresh mask per
    /// call while training; the plain round otherwise).
    pub(crate) fn spread_dropped(&self, z: Tensor<B, 2>, dropout: &FastDropout) -> Tensor<B, 2> {
        self.spread_weighted(z, dropout.forward(self.weight.clone()))
    }

    /// One round over these edges with `weight` (`[edges, 1]`) in place of `Â`'s entries.
    fn spread_weighted(&self, z: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
        let messages = z.clone().select(0, self.source.clone()) * weight;
        z.zeros_like()
            .select_assign(0, self.target.clone(), messages, IndexingUpdateOp::Add)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use megagraph_graph::GraphOptions;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    type B = Autodiff<Flex>;

    /// A random undirected graph of `n` nodes and about `2 n` edges, with isolated nodes likely.
    fn random_graph(rng: &mut impl Rng, n: usize) -> Graph {
        let edges: Vec<(u32, u32)> = (0..2 * n)
            .map(|_| (rng.random_range(0..n as u32), rng.random_range(0..n as u32)))
            .filter(|(u, v)| u != v)
            .collect();
        Graph::from_edges(n, &edges, &GraphOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// APPNP by hand in float64 on the dense `Â` of the subgraph induced by `kept`: rows of
    /// dropped nodes are `α H` (they receive nothing) and send nothing.
    fn reference(graph: &Graph, kept: &[bool], h: &[f64], c: usize, steps: usize, alpha: f64) -> Vec<f64> {
        let n = graph.num_nodes();
        let degree: Vec<f64> = (0..n).map(|v| (graph.neighbors(v as u32).len() + 1) as f64).collect();
        let mut a = vec![vec![0.0; n]; n];
        for v in (0..n).filter(|&v| kept[v]) {
            a[v][v] = 1.0 / degree[v];
            for &u in graph.neighbors(v as u32) {
                if kept[u as usize] {
                    a[v][u as usize] = 1.0 / (degree[v] * degree[u as usize]).sqrt();
                }
            }
        }
        let mut z = h.to_vec();
        for _ in 0..steps {
            z = (0..n * c)
                .map(|i| (1.0 - alpha) * (0..n).map(|u| a[i / c][u] * z[u * c + i % c]).sum::<f64>() + alpha * h[i])
                .collect();
        }
        z
    }

    #[test]
    fn propagation_over_positions_matches_a_float64_reference_with_padding_and_missing_nodes() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..5 {
            let (n, c) = (rng.random_range(2..30), rng.random_range(1..5));
            let graph = random_graph(&mut rng, n);
            let (steps, alpha) = (rng.random_range(1..12), rng.random_range(0.05..1.0));
            let h: Vec<f64> = (0..n * c).map(|_| rng.random_range(-3.0..3.0)).collect();
            // the batch holds a random subset of the nodes in a random order, with padding
            let kept: Vec<bool> = (0..n).map(|_| rng.random_bool(0.7)).collect();
            let mut nodes: Vec<Option<u32>> = (0..n as u32).filter(|&v| kept[v as usize]).map(Some).collect();
            nodes.extend((0..rng.random_range(0..4)).map(|_| None));
            for i in (1..nodes.len()).rev() {
                nodes.swap(i, rng.random_range(0..=i));
            }
            let rows: Vec<f32> = nodes
                .iter()
                .flat_map(|node| match node {
                    Some(v) => h[*v as usize * c..(*v as usize + 1) * c].iter().map(|&x| x as f32).collect(),
                    None => vec![0.0; c],
                })
                .collect();
            let propagation = PredictionPropagation::new(steps, alpha, &graph);
            let logits = Tensor::<B, 2>::from_data(TensorData::new(rows, [nodes.len(), c]), &Default::default());
            let out = propagation.apply(logits, &propagation.edges(&graph, &nodes));
            let out: Vec<f32> = out.into_data().iter::<f32>().collect();
            let expected = reference(&graph, &kept, &h, c, steps, alpha);
            for (p, node) in nodes.iter().enumerate() {
                let Some(v) = node else { continue };
                for k in 0..c {
                    let (got, want) = (out[p * c + k] as f64, expected[*v as usize * c + k]);
                    assert!((got - want).abs() < 1e-4, "seed {seed}: node {v} class {k}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn edge_dropout_is_unbiased_while_training_and_off_in_evaluation() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, c) = (rng.random_range(8..20), 2);
        let graph = random_graph(&mut rng, n);
        let (steps, alpha, prob) = (rng.random_range(1..5), rng.random_range(0.05..0.5), rng.random_range(0.2..0.7));
        let h: Vec<f64> = (0..n * c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let nodes: Vec<Option<u32>> = (0..n as u32).map(Some).collect();
        let expected = reference(&graph, &vec![true; n], &h, c, steps, alpha);
        let propagation = PredictionPropagation::new(steps, alpha, &graph).with_edge_dropout(prob);
        let edges = propagation.edges(&graph, &nodes);
        let rows = TensorData::new(h.iter().map(|&x| x as f32).collect::<Vec<_>>(), [n, c]);
        // evaluation (no autodiff): Â whole
        let evaluated = propagation.apply(Tensor::<Flex, 2>::from_data(rows.clone(), &Default::default()), &edges);
        for (i, got) in evaluated.into_data().iter::<f32>().enumerate() {
            assert!((got as f64 - expected[i]).abs() < 1e-4, "seed {seed}: entry {i}: {got} vs {}", expected[i]);
        }
        // training: every draw differs from Â's propagation, their mean converges to it
        let draws = 2000;
        let mut sum = vec![0.0f64; n * c];
        let mut squares = vec![0.0f64; n * c];
        for draw in 0..draws {
            let out = propagation.apply(Tensor::<B, 2>::from_data(rows.clone(), &Default::default()), &edges);
            let out: Vec<f64> = out.into_data().iter::<f32>().map(f64::from).collect();
            if draw == 0 {
                let moved = out.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                assert!(moved > 1e-3, "seed {seed}: a training draw equals the exact propagation");
            }
            for (i, value) in out.into_iter().enumerate() {
                sum[i] += value;
                squares[i] += value * value;
            }
        }
        for i in 0..n * c {
            let mean = sum[i] / draws as f64;
            let std = (squares[i] / draws as f64 - mean * mean).max(0.0).sqrt();
            let bound = 5.0 * std / (draws as f64).sqrt() + 1e-3;
            assert!((mean - expected[i]).abs() < bound, "seed {seed}: entry {i}: mean {mean} vs {} (bound {bound})", expected[i]);
        }
    }

    #[test]
    fn propagation_gradients_match_finite_differences() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (n, c) = (12, 3);
        let graph = random_graph(&mut rng, n);
        let nodes: Vec<Option<u32>> = (0..n as u32).map(Some).collect();
        let h: Vec<f64> = (0..n * c).map(|_| rng.random_range(-2.0..2.0)).collect();
        // a fixed random readout w makes the scalar loss Σ w ⊙ Z
        let w: Vec<f64> = (0..n * c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (steps, alpha) = (6, 0.2);
        let propagation = PredictionPropagation::new(steps, alpha, &graph);
        let kept = vec![true; n];
        let loss = |h: &[f64]| -> f64 {
            reference(&graph, &kept, h, c, steps, alpha).iter().zip(&w).map(|(z, w)| z * w).sum()
        };
        let device = Default::default();
        let logits = Tensor::<B, 2>::from_data(
            TensorData::new(h.iter().map(|&x| x as f32).collect::<Vec<_>>(), [n, c]),
            &device,
        )
        .require_grad();
        let readout = Tensor::<B, 2>::from_data(TensorData::new(w.iter().map(|&x| x as f32).collect::<Vec<_>>(), [n, c]), &device);
        let z = propagation.apply(logits.clone(), &propagation.edges(&graph, &nodes));
        let grads = (z * readout).sum().backward();
        let grad: Vec<f32> = logits.grad(&grads).unwrap_or_else(|| panic!("no gradient")).into_data().iter::<f32>().collect();
        for i in 0..n * c {
            let eps = 1e-4;
            let (mut up, mut down) = (h.clone(), h.clone());
            up[i] += eps;
            down[i] -= eps;
            let numeric = (loss(&up) - loss(&down)) / (2.0 * eps);
            assert!((grad[i] as f64 - numeric).abs() < 1e-4, "seed {seed}: entry {i}: {} vs {numeric}", grad[i]);
        }
    }
}

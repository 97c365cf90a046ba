//! Graphormer's edge encoding against a plain float64 computation on a small random graph:
//! shortest paths found by a breadth-first search written here, the bias `c_ij[h] = (1/N)
//! Σ_n x_{e_n} · w_n[:, h]` summed by hand, the gradients of the per-hop weights against central
//! differences of that sum, and the model's use of it (every layer's dense bias, with and
//! without the graph token; a batch without paths is refused). Checkpoints of models without
//! it: `checkpoints.rs`.

use std::collections::VecDeque;

use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use megagraph_kernels::{AttentionError, DistanceBias};
use megagraph_models::encoders::{EdgeEncoding, EdgeEncodingConfig, EdgePaths};
use megagraph_models::{GraphBatch, LocalAttention, NodeInput};

use crate::common;
use common::{assert_close, small_model, values};

type B = Flex;
type AB = Autodiff<Flex>;

const BATCH: usize = 2;
const SEQ: usize = 7;
const NODES: usize = 12;
const HEADS: usize = 3;
const EDGE_DIM: usize = 4;
const MAX_DISTANCE: u8 = 3;
const HOPS: usize = MAX_DISTANCE as usize;
const D_MODEL: usize = 6;

/// Fresh uniform draws in `[-1, 1)`.
fn uniform(n: usize) -> Vec<f32> {
    Tensor::<B, 1>::random([n], Distribution::Uniform(-1.0, 1.0), &Default::default())
        .into_data()
        .iter::<f32>()
        .collect()
}

/// A random undirected graph on `NODES` nodes as adjacency lists of `(neighbour, edge id)`,
/// sorted by neighbour, with its edge features `[edges, EDGE_DIM]`, and `BATCH` sequences of
/// `SEQ` distinct nodes.
struct Problem {
    adjacency: Vec<Vec<(usize, usize)>>,
    features: Vec<f32>,
    sequences: Vec<Vec<usize>>,
}

impl Problem {
    fn draw() -> Self {
        let draws = uniform(NODES * NODES + BATCH * NODES);
        let mut adjacency = vec![Vec::new(); NODES];
        let mut edges = 0;
        for u in 0..NODES {
            for v in u + 1..NODES {
                // about 2.5 neighbours per node, plus a ring so most pairs are near
                if draws[u * NODES + v] > 0.75 || v == u + 1 {
                    adjacency[u].push((v, edges));
                    adjacency[v].push((u, edges));
                    edges += 1;
                }
            }
        }
        adjacency.iter_mut().for_each(|row| row.sort_unstable());
        let sequences = (0..BATCH)
            .map(|b| {
                let mut order: Vec<usize> = (0..NODES).collect();
                order.sort_by(|&x, &y| {
                    draws[NODES * NODES + b * NODES + x].total_cmp(&draws[NODES * NODES + b * NODES + y])
                });
                order.truncate(SEQ);
                order
            })
            .collect();
        Self {
            adjacency,
            features: uniform(edges * EDGE_DIM),
            sequences,
        }
    }

    fn edges(&self) -> usize {
        self.features.len() / EDGE_DIM
    }

    /// The edges of one shortest path from `source` to `target` (breadth-first, neighbours in
    /// ascending order, each node's parent the first to reach it), if within `MAX_DISTANCE`.
    fn path(&self, source: usize, target: usize) -> Vec<usize> {
        let mut parent: Vec<Option<(usize, usize)>> = vec![None; NODES];
        let mut depth = vec![usize::MAX; NODES];
        depth[source] = 0;
        let mut queue = VecDeque::from([source]);
        while let Some(u) = queue.pop_front() {
            for &(v, edge) in &self.adjacency[u] {
                if depth[v] == usize::MAX {
                    depth[v] = depth[u] + 1;
                    parent[v] = Some((u, edge));
                    queue.push_back(v);
                }
            }
        }
        if source == target || depth[target] > HOPS {
            return Vec::new();
        }
        let mut path = Vec::new();
        let mut at = target;
        while let Some((u, edge)) = parent[at] {
            path.push(edge);
            at = u;
        }
        path.reverse();
        path
    }

    /// The paths as the model reads them: all edges' features, their ids per pair and hop
    /// (`edges` past a path's end) and `1 / N`.
    fn paths<BK: Backend>(&self) -> EdgePaths<BK> {
        let device = Default::default();
        let edges = self.edges();
        let mut ids = vec![edges as i64; BATCH * SEQ * SEQ * HOPS];
        let mut inverse = vec![0.0f32; BATCH * SEQ * SEQ];
        for (b, sequence) in self.sequences.iter().enumerate() {
            for (i, &u) in sequence.iter().enumerate() {
                for (j, &v) in sequence.iter().enumerate() {
                    let path = self.path(u, v);
                    let pair = (b * SEQ + i) * SEQ + j;
                    if !path.is_empty() {
                        inverse[pair] = 1.0 / path.len() as f32;
                    }
                    for (n, &edge) in path.iter().enumerate() {
                        ids[pair * HOPS + n] = edge as i64;
                    }
                }
            }
        }
        EdgePaths {
            features: Tensor::from_data(TensorData::new(self.features.clone(), [edges, EDGE_DIM]), &device),
            edge_ids: Tensor::<BK, 4, Int>::from_data(TensorData::new(ids, [BATCH, SEQ, SEQ, HOPS]), &device),
            inverse_length: Tensor::from_data(TensorData::new(inverse, [BATCH, SEQ, SEQ]), &device),
        }
    }

    /// The float64 bias `[BATCH, HEADS, SEQ, SEQ]` for weights `weight` (`[EDGE_DIM, HOPS ·
    /// HEADS]` row-major).
    fn reference(&self, weight: &[f64]) -> Vec<f64> {
        let mut bias = vec![0.0; BATCH * HEADS * SEQ * SEQ];
        for (b, sequence) in self.sequences.iter().enumerate() {
            for (i, &u) in sequence.iter().enumerate() {
                for (j, &v) in sequence.iter().enumerate() {
                    let path = self.path(u, v);
                    for h in 0..HEADS {
                        let sum: f64 = path
                            .iter()
                            .enumerate()
                            .map(|(n, &edge)| {
                                (0..EDGE_DIM)
                                    .map(|d| {
                                        f64::from(self.features[edge * EDGE_DIM + d])
                                            * weight[d * HOPS * HEADS + n * HEADS + h]
                                    })
                                    .sum::<f64>()
                            })
                            .sum();
                        bias[((b * HEADS + h) * SEQ + i) * SEQ + j] =
                            if path.is_empty() { 0.0 } else { sum / path.len() as f64 };
                    }
                }
            }
        }
        bias
    }
}

/// An edge encoding with fresh `N(0, 1)` weights.
fn encoding<BK: Backend>() -> EdgeEncoding<BK> {
    let device = Default::default();
    let mut encoding = EdgeEncodingConfig::new(EDGE_DIM, HEADS, MAX_DISTANCE).init(&device);
    encoding.weight = Param::from_tensor(Tensor::random(
        [EDGE_DIM, HOPS * HEADS],
        Distribution::Normal(0.0, 1.0),
        &device,
    ));
    encoding
}

#[test]
fn the_bias_matches_float64_paths_summed_by_hand() {
    let _turn = crate::turn();
    for _ in 0..3 {
        let problem = Problem::draw();
        let encoding = encoding::<B>();
        let bias = encoding.forward(&problem.paths()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bias.dims(), [BATCH, HEADS, SEQ, SEQ]);
        let want = problem.reference(&values(encoding.weight.val()));
        assert!(want.iter().any(|&w| w.abs() > 1e-3), "some pair has a path");
        assert_close(&values(bias), &want, 1e-5, "edge bias");
    }
}

#[test]
fn a_block_of_rows_gets_its_rows_of_the_bias() {
    let _turn = crate::turn();
    // a rank of a context-parallel ring: the paths of its rows over the sequence padded to a
    // multiple of cp (7 nodes padded to 9 for three blocks), and the encoder computes only them
    let problem = Problem::draw();
    let encoding = encoding::<B>();
    let want = problem.reference(&values(encoding.weight.val()));
    let (padded, block) = (9, 3);
    for position in 0..3 {
        let rows = position * block..(position + 1) * block;
        let paths = problem.paths().block_rows(rows.clone(), padded).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(paths.edge_ids.dims(), [BATCH, block, padded, HOPS]);
        let bias = encoding.forward(&paths).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bias.dims(), [BATCH, HEADS, block, padded]);
        let mut expected = vec![0.0; BATCH * HEADS * block * padded];
        for bh in 0..BATCH * HEADS {
            for (r, i) in rows.clone().enumerate().filter(|&(_, i)| i < SEQ) {
                for j in 0..SEQ {
                    expected[(bh * block + r) * padded + j] = want[(bh * SEQ + i) * SEQ + j];
                }
            }
        }
        assert_close(&values(bias), &expected, 1e-5, "edge bias rows");
    }
    // rows past the padded sequence are refused, naming the paths
    let err = problem.paths::<B>().block_rows(6..10, 9).err();
    assert!(
        matches!(err, Some(AttentionError::ShapeMismatch { tensor: "edge_paths.edge_ids", .. })),
        "{err:?}"
    );
}

#[test]
fn the_bias_is_stored_heads_first() {
    let _turn = crate::turn();
    // every layer reads the bias as `[batch, heads, seq, seq]` rows: a strided view would be
    // copied again by each layer's attention, forward and backward
    let problem = Problem::draw();
    let bias = encoding::<B>()
        .forward(&problem.paths())
        .unwrap_or_else(|e| panic!("{e}"));
    let stored = bias.into_primitive().tensor();
    assert!(stored.is_contiguous(), "the bias is a strided view: {:?}", stored.layout());
}

#[test]
fn weight_gradients_match_float64_central_differences() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let encoding = encoding::<AB>();
    let device = Default::default();
    let coefficients = Tensor::<AB, 4>::random([BATCH, HEADS, SEQ, SEQ], Distribution::Normal(0.0, 1.0), &device);
    let bias = encoding.forward(&problem.paths()).unwrap_or_else(|e| panic!("{e}"));
    let grads = (bias * coefficients.clone()).sum().backward();
    let got = values(
        encoding
            .weight
            .grad(&grads)
            .unwrap_or_else(|| panic!("no weight gradient")),
    );
    let (weight, coefficients) = (values(encoding.weight.val()), values(coefficients));
    let loss = |w: &[f64]| -> f64 { problem.reference(w).iter().zip(&coefficients).map(|(b, c)| b * c).sum() };
    let step = 1e-4;
    let want: Vec<f64> = (0..weight.len())
        .map(|k| {
            let (mut up, mut down) = (weight.clone(), weight.clone());
            up[k] += step;
            down[k] -= step;
            (loss(&up) - loss(&down)) / (2.0 * step)
        })
        .collect();
    assert!(want.iter().any(|&w| w.abs() > 1e-3), "some weight matters");
    assert_close(&got, &want, 1e-4, "weight gradient");
}

/// A batch of `problem`'s sequences with random features, a random distance index and the
/// edge paths.
fn batch(problem: &Problem, with_paths: bool) -> GraphBatch<B> {
    let device = Default::default();
    let distances: Vec<u8> = uniform(BATCH * SEQ * SEQ)
        .iter()
        .map(|x| ((x + 1.0) * 2.0) as u8)
        .collect();
    GraphBatch {
        input: NodeInput::Features(Tensor::random(
            [BATCH, SEQ, D_MODEL],
            Distribution::Normal(0.0, 1.0),
            &device,
        )),
        in_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        out_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        distance: DistanceBias::<B>::index_from_u8(distances, [BATCH, SEQ, SEQ], &device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into(),
        padding: Tensor::<B, 2>::zeros([BATCH, SEQ], &device).equal_elem(1.0),
        edge_paths: with_paths.then(|| problem.paths()),
        label_input: None,
    }
}

#[test]
fn every_layer_reads_the_bias_with_and_without_the_graph_token() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let device = Default::default();
    let batch = batch(&problem, true);
    for graph_token in [false, true] {
        let mut model = small_model(NODES, D_MODEL, HEADS, MAX_DISTANCE)
            .with_edge_encoding(Some(EDGE_DIM))
            .with_graph_token(graph_token)
            .init::<B>(&device);
        model.edge_encoding = Some(encoding());
        let bias = model
            .edge_bias(&batch)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("a bias"));
        let own = values(
            model
                .edge_encoding
                .as_ref()
                .map(|e| e.forward(&problem.paths()).unwrap())
                .unwrap(),
        );
        let len = SEQ + usize::from(graph_token);
        assert_eq!(bias.dims(), [BATCH, HEADS, len, len]);
        // the nodes' pairs read the encoding; the token's row and column read 0
        let bias = values(bias);
        let offset = usize::from(graph_token);
        for bh in 0..BATCH * HEADS {
            for i in 0..len {
                for j in 0..len {
                    let got = bias[(bh * len + i) * len + j];
                    let want = if i < offset || j < offset {
                        0.0
                    } else {
                        own[(bh * SEQ + i - offset) * SEQ + j - offset]
                    };
                    assert!((got - want).abs() < 1e-6, "graph_token {graph_token}: ({bh}, {i}, {j})");
                }
            }
        }
        // the logits follow the encoding: other weights, other logits
        let logits = values(model.forward(batch.clone()));
        model.edge_encoding = Some(encoding());
        let moved = values(model.forward(batch.clone()));
        let change = logits
            .iter()
            .zip(&moved)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            change > 1e-4,
            "graph_token {graph_token}: the encoding changed no logit ({change})"
        );
        // a batch without paths is refused
        match model.forward_with(batch_without_paths(&batch), &LocalAttention) {
            Err(AttentionError::MissingInput {
                input: "edge_paths", ..
            }) => {}
            other => panic!("expected a missing-input error, got {:?}", other.map(|t| t.dims())),
        }
    }
}

fn batch_without_paths(batch: &GraphBatch<B>) -> GraphBatch<B> {
    GraphBatch {
        edge_paths: None,
        label_input: None,
        ..batch.clone()
    }
}

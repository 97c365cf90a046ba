//! Shared test support: a tiny model, a synthetic batch source built directly as
//! `GraphBatch`es, the single-device reference run, and parameter comparison.

#![allow(dead_code)]

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use megagraph_graph::hash::{GOLDEN, splitmix64};
use megagraph_models::encoders::EdgePaths;
use megagraph_models::{GraphBatch, GraphTransformer, GraphTransformerConfig, NodeInput, masked_cross_entropy};
use megagraph_parallel::{BatchSource, TrainBatch, trainable};

pub type B = Autodiff<Flex>;
pub type Inner = Flex;

/// Three steps of 12 of the synthetic sequences: two in order, one shuffled.
pub fn steps() -> Vec<Vec<usize>> {
    vec![
        (0..12).collect(),
        (12..24).collect(),
        vec![30, 2, 25, 7, 33, 18, 5, 11, 27, 35, 0, 21],
    ]
}

/// The optimizer of the parallel and single-device runs compared by the tests.
pub fn optimizer() -> AdamWConfig {
    AdamWConfig::new().with_weight_decay(0.01)
}

/// SplitMix64: a small deterministic generator for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        splitmix64(self.0)
    }

    /// Uniform in `[-amplitude, amplitude)`.
    pub fn uniform(&mut self, amplitude: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amplitude
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

pub const FEATURES: usize = 8;
pub const CLASSES: usize = 3;
pub const MAX_DISTANCE: u8 = 3;

/// The tiny model of the tests: hidden 16, 2 heads, dropout 0.
pub fn model_config(layers: usize) -> GraphTransformerConfig {
    GraphTransformerConfig::new(0, CLASSES)
        .with_feature_dim(Some(FEATURES))
        .with_num_layers(layers)
        .with_num_heads(2)
        .with_hidden(16)
        .with_ffn_hidden(16)
        .with_dropout(0.0)
        .with_input_dropout(0.0)
        .with_max_degree(8)
        .with_max_distance(MAX_DISTANCE)
        .with_block_size(8)
}

/// An initialized model (parameters materialized, so clones are identical).
pub fn model(layers: usize, seed: u64) -> GraphTransformer<Inner> {
    model_of(model_config(layers), seed)
}

/// An initialized model of `config` (parameters materialized, so clones are identical).
pub fn model_of(config: GraphTransformerConfig, seed: u64) -> GraphTransformer<Inner> {
    let device = Default::default();
    Inner::seed(&device, seed);
    megagraph_models::materialize(config.init(&device))
}

/// Width of the edge features of [`Synthetic::with_edges`].
pub const EDGE_DIM: usize = 5;
/// Edges of each synthetic sequence with edge features.
const EDGES_PER_SEQUENCE: usize = 7;

/// One synthetic sequence.
#[derive(Clone, Debug)]
struct Sequence {
    features: Vec<f32>,
    in_degree: Vec<i64>,
    out_degree: Vec<i64>,
    distance: Vec<i64>,
    padding: Vec<bool>,
    labels: Vec<i64>,
    weight: Vec<f32>,
    /// With edges: the sequence's edge features `[EDGES_PER_SEQUENCE, EDGE_DIM]`.
    edge_features: Vec<f32>,
    /// With edges: per pair and hop the sequence's edge (`-1` past the path's end), `[seq, seq,
    /// MAX_DISTANCE]`.
    edge_ids: Vec<i64>,
    /// With edges: `1 / hops` of each pair's path (0 without one), `[seq, seq]`.
    inverse_length: Vec<f32>,
}

/// Random sequences of `seq_len` nodes, some with padded tails, each node a training node with
/// probability 1/2.
pub struct Synthetic {
    seq_len: usize,
    sequences: Vec<Sequence>,
    /// Sequence whose batch fails (tests of error reporting).
    pub failing: Option<usize>,
}

impl Synthetic {
    pub fn new(count: usize, seq_len: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let buckets = MAX_DISTANCE as u64 + 2;
        let sequences = (0..count)
            .map(|i| {
                let real = if i % 3 == 1 {
                    seq_len - 1 - (i % 4)
                } else {
                    seq_len
                };
                let padding: Vec<bool> = (0..seq_len).map(|p| p >= real).collect();
                let weight = (0..seq_len)
                    .map(|p| {
                        if p < real && rng.below(2) == 0 {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect();
                Sequence {
                    features: (0..seq_len * FEATURES).map(|_| rng.uniform(1.0)).collect(),
                    in_degree: (0..seq_len).map(|_| rng.below(12) as i64).collect(),
                    out_degree: (0..seq_len).map(|_| rng.below(12) as i64).collect(),
                    distance: (0..seq_len * seq_len)
                        .map(|j| {
                            if j / seq_len == j % seq_len {
                                0
                            } else {
                                1 + rng.below(buckets - 1) as i64
                            }
                        })
                        .collect(),
                    padding,
                    labels: (0..seq_len)
                        .map(|_| rng.below(CLASSES as u64) as i64)
                        .collect(),
                    weight,
                    edge_features: Vec::new(),
                    edge_ids: Vec::new(),
                    inverse_length: Vec::new(),
                }
            })
            .collect();
        Self {
            seq_len,
            sequences,
            failing: None,
        }
    }

    /// The same sequences with edge paths for an edge encoding of `EDGE_DIM` features: each
    /// pair of real nodes at distance bucket `1..=MAX_DISTANCE` gets a path of that many random
    /// edges of its sequence (drawn from `seed`), other pairs none.
    pub fn with_edges(mut self, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let (s, hops) = (self.seq_len, usize::from(MAX_DISTANCE));
        for sequence in &mut self.sequences {
            sequence.edge_features = (0..EDGES_PER_SEQUENCE * EDGE_DIM).map(|_| rng.uniform(1.0)).collect();
            sequence.edge_ids = vec![-1; s * s * hops];
            sequence.inverse_length = vec![0.0; s * s];
            for pair in 0..s * s {
                let (i, j) = (pair / s, pair % s);
                let length = sequence.distance[pair] as usize;
                if sequence.padding[i] || sequence.padding[j] || !(1..=hops).contains(&length) {
                    continue;
                }
                sequence.inverse_length[pair] = 1.0 / length as f32;
                for hop in 0..length {
                    sequence.edge_ids[pair * hops + hop] = rng.below(EDGES_PER_SEQUENCE as u64) as i64;
                }
            }
        }
        self
    }

    pub fn shared(self) -> Arc<dyn BatchSource<B>> {
        Arc::new(self)
    }
}

impl<Bk: Backend> BatchSource<Bk> for Synthetic {
    fn batch(&self, sequences: &[usize], device: &Bk::Device) -> Result<TrainBatch<Bk>, String> {
        let s = self.seq_len;
        let n = sequences.len();
        let mut picked = Vec::with_capacity(n);
        for &i in sequences {
            if self.failing == Some(i) {
                return Err(format!("sequence {i} cannot be loaded (test)"));
            }
            picked.push(
                self.sequences
                    .get(i)
                    .ok_or_else(|| format!("sequence {i} out of range"))?,
            );
        }
        let floats = |f: &dyn Fn(&Sequence) -> &Vec<f32>| -> Vec<f32> {
            picked.iter().flat_map(|q| f(q).iter().copied()).collect()
        };
        let ints = |f: &dyn Fn(&Sequence) -> &Vec<i64>| -> Vec<i64> {
            picked.iter().flat_map(|q| f(q).iter().copied()).collect()
        };
        let padding: Vec<bool> = picked
            .iter()
            .flat_map(|q| q.padding.iter().copied())
            .collect();
        Ok(TrainBatch {
            graph: GraphBatch {
                input: NodeInput::Features(Tensor::from_data(
                    TensorData::new(floats(&|q| &q.features), [n, s, FEATURES]),
                    device,
                )),
                in_degree: Tensor::from_data(
                    TensorData::new(ints(&|q| &q.in_degree), [n, s]),
                    device,
                ),
                out_degree: Tensor::from_data(
                    TensorData::new(ints(&|q| &q.out_degree), [n, s]),
                    device,
                ),
                distance: Tensor::<Bk, 3, Int>::from_data(
                    TensorData::new(ints(&|q| &q.distance), [n, s, s]),
                    device,
                )
                .into(),
                padding: Tensor::from_data(TensorData::new(padding, [n, s]), device),
                edge_paths: edge_paths(&picked, s, device),
                label_input: None,
            },
            labels: Tensor::from_data(TensorData::new(ints(&|q| &q.labels), [n, s]), device),
            train_weight: Tensor::from_data(
                TensorData::new(floats(&|q| &q.weight), [n, s]),
                device,
            ),
        })
    }

    fn train_nodes(&self, sequences: &[usize]) -> usize {
        sequences
            .iter()
            .filter_map(|&i| self.sequences.get(i))
            .map(|q| q.weight.iter().filter(|&&w| w > 0.0).count())
            .sum()
    }
}

/// The edge paths of a batch of `picked` sequences (their edges one after the other; `None`
/// without edges).
fn edge_paths<Bk: Backend>(picked: &[&Sequence], s: usize, device: &Bk::Device) -> Option<EdgePaths<Bk>> {
    if picked.first()?.edge_features.is_empty() {
        return None;
    }
    let (n, hops) = (picked.len(), usize::from(MAX_DISTANCE));
    let edges = n * EDGES_PER_SEQUENCE;
    let features: Vec<f32> = picked.iter().flat_map(|q| q.edge_features.iter().copied()).collect();
    let ids: Vec<i64> = picked
        .iter()
        .enumerate()
        .flat_map(|(b, q)| {
            q.edge_ids
                .iter()
                .map(move |&id| if id < 0 { edges as i64 } else { (b * EDGES_PER_SEQUENCE) as i64 + id })
        })
        .collect();
    let inverse_length: Vec<f32> = picked.iter().flat_map(|q| q.inverse_length.iter().copied()).collect();
    Some(EdgePaths {
        features: Tensor::from_data(TensorData::new(features, [edges, EDGE_DIM]), device),
        edge_ids: Tensor::from_data(TensorData::new(ids, [n, s, s, hops]), device),
        inverse_length: Tensor::from_data(TensorData::new(inverse_length, [n, s, s]), device),
    })
}

/// Single-device training as in `megagraph-train`: one forward over the whole batch, AdamW.
pub fn single_device(
    model: GraphTransformer<Inner>,
    source: &Synthetic,
    steps: &[Vec<usize>],
    lr: f64,
    optimizer: &AdamWConfig,
) -> (Vec<f64>, GraphTransformer<Inner>) {
    let device = Default::default();
    let mut model = trainable(GraphTransformer::<B>::from_inner(model));
    let mut optim = optimizer.init::<B, GraphTransformer<B>>();
    let mut losses = Vec::new();
    for sequences in steps {
        let batch =
            BatchSource::<B>::batch(source, sequences, &device).unwrap_or_else(|e| panic!("{e}"));
        let count = BatchSource::<B>::train_nodes(source, sequences);
        let logits = model.forward(batch.graph);
        let loss = masked_cross_entropy(logits, batch.labels, batch.train_weight, count);
        losses.push(loss.clone().into_scalar().elem::<f64>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(lr, model, grads);
    }
    (losses, model.valid())
}

/// Every float parameter of a module as host vectors, in visiting order, with its path.
pub fn parameters<Bk: Backend, M: Module<Bk>>(module: &M) -> Vec<(String, Vec<f32>)> {
    struct Collect {
        path: Vec<String>,
        out: Vec<(String, Vec<f32>)>,
    }
    impl<Bk: Backend> ModuleVisitor<Bk> for Collect {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Bk, D>>) {
            let values = param.val().into_data().iter::<f32>().collect();
            self.out.push((self.path.join("."), values));
        }
    }
    let mut collect = Collect {
        path: Vec::new(),
        out: Vec::new(),
    };
    module.visit(&mut collect);
    collect.out
}

/// `‖a − b‖₂ / max(‖b‖₂, 1e-12)`.
pub fn relative(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let diff: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(1e-12)
}

/// The largest relative difference over the parameters of two models, and where it is.
pub fn max_parameter_difference<Bk: Backend>(
    a: &GraphTransformer<Bk>,
    b: &GraphTransformer<Bk>,
) -> (f64, String) {
    let pa = parameters(a);
    let pb = parameters(b);
    assert_eq!(pa.len(), pb.len(), "different parameter counts");
    pa.iter()
        .zip(&pb)
        .map(|((name, x), (_, y))| (relative(x, y), name.clone()))
        .fold(
            (0.0, String::new()),
            |acc, cur| if cur.0 > acc.0 { cur } else { acc },
        )
}

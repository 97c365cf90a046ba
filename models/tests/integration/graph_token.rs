//! Graphormer's graph token against a plain float64 computation: the attention of a layer with
//! the token (dense `S + 1` attention, the bias built by hand from the distances and the virtual
//! scalar), the gradients of the virtual-distance scalars and of the token embedding, and the
//! model's behaviour with it (dense and sparse indexes agree, padding stays masked). Checkpoints
//! of models without it: `checkpoints.rs`.

use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use megagraph_kernels::{BucketIndex, DistanceBias, SparseBucketIndex};
use megagraph_models::encoders::{GraphToken, GraphTokenConfig, SpatialEncoding, SpatialEncodingConfig};
use megagraph_models::{
    GraphAttention, GraphAttentionConfig, GraphBatch, LocalAttention, NodeInput, spatial_bias,
};

use crate::common;
use common::{assert_close, linear_f64, small_model, token_qkv_f64, values};

type B = Flex;
type AB = Autodiff<Flex>;

const BATCH: usize = 2;
const SEQ: usize = 6;
const HEADS: usize = 2;
const D_MODEL: usize = 8;
const MAX_DISTANCE: u8 = 2;
/// `max_distance + 1`: "farther".
const FAR: u8 = MAX_DISTANCE + 1;
/// The token's row of the table, after the distance buckets.
const VIRTUAL: u8 = MAX_DISTANCE + 2;

/// A fresh random problem: node inputs, distances, padding and the parameters of one layer.
struct Problem {
    /// `[BATCH, SEQ, D_MODEL]` row-major.
    nodes: Vec<f32>,
    /// `[BATCH, SEQ, SEQ]` buckets `0..=FAR`, 0 on the diagonal.
    distances: Vec<u8>,
    /// `[BATCH, SEQ]`, `true` for padding.
    padding: Vec<bool>,
}

impl Problem {
    fn draw() -> Self {
        let uniform = |n: usize, high: f64| {
            Tensor::<B, 1>::random([n], Distribution::Uniform(0.0, high), &Default::default())
                .into_data()
                .iter::<f32>()
                .collect::<Vec<_>>()
        };
        let nodes = uniform(BATCH * SEQ * D_MODEL, 2.0).into_iter().map(|x| x - 1.0).collect();
        let mut distances: Vec<u8> = uniform(BATCH * SEQ * SEQ, f64::from(FAR) + 1.0)
            .into_iter()
            .map(|x| (x as u8).min(FAR))
            .collect();
        for b in 0..BATCH {
            for i in 0..SEQ {
                distances[(b * SEQ + i) * SEQ + i] = 0;
            }
        }
        // the second sequence ends in two padded positions
        let padding = (0..BATCH * SEQ).map(|at| at / SEQ == 1 && at % SEQ >= SEQ - 2).collect();
        Self {
            nodes,
            distances,
            padding,
        }
    }

    fn nodes<BK: Backend>(&self, device: &BK::Device) -> Tensor<BK, 3> {
        Tensor::from_data(TensorData::new(self.nodes.clone(), [BATCH, SEQ, D_MODEL]), device)
    }

    fn dense<BK: Backend>(&self, device: &BK::Device) -> BucketIndex<BK> {
        DistanceBias::<BK>::index_from_u8(self.distances.clone(), [BATCH, SEQ, SEQ], device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into()
    }

    /// The same distances stored sparsely: every pair below the far bucket.
    fn sparse<BK: Backend>(&self, device: &BK::Device) -> BucketIndex<BK> {
        SparseBucketIndex::from_dense_buckets(&self.distances, [BATCH, SEQ, SEQ], FAR, device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into()
    }

    fn padding<BK: Backend>(&self, device: &BK::Device) -> Tensor<BK, 2, Bool> {
        Tensor::from_data(TensorData::new(self.padding.clone(), [BATCH, SEQ]), device)
    }
}

/// The float64 reference: the token prepended to the nodes, dense attention over `SEQ + 1`
/// positions with the bias read by hand (`table[distance]` between nodes, `table[VIRTUAL]`
/// for every pair with the token), padded keys masked; `[BATCH, SEQ + 1, D_MODEL]`.
fn reference<BK: Backend>(attention: &GraphAttention<BK>, problem: &Problem, token: &[f64], table: &[f64]) -> Vec<f64> {
    let len = SEQ + 1;
    let head_dim = D_MODEL / HEADS;
    let [q, k, v] = token_qkv_f64(attention, &problem.nodes, SEQ, token);
    let mut attended = vec![0.0; q.len()];
    for b in 0..BATCH {
        let row = |t: &[f64], i: usize, h: usize| t[(b * len + i) * D_MODEL + h * head_dim..][..head_dim].to_vec();
        for h in 0..HEADS {
            for i in 0..len {
                let qi = row(&q, i, h);
                let logits: Vec<f64> = (0..len)
                    .map(|j| {
                        if j > 0 && problem.padding[b * SEQ + j - 1] {
                            return f64::NEG_INFINITY;
                        }
                        let bucket = if i == 0 || j == 0 {
                            VIRTUAL
                        } else {
                            problem.distances[(b * SEQ + i - 1) * SEQ + j - 1]
                        };
                        let dot: f64 = qi.iter().zip(row(&k, j, h)).map(|(a, c)| a * c).sum();
                        dot / (head_dim as f64).sqrt() + table[usize::from(bucket) * HEADS + h]
                    })
                    .collect();
                let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for (j, w) in weights.iter().enumerate() {
                    for (d, vd) in row(&v, j, h).iter().enumerate() {
                        attended[(b * len + i) * D_MODEL + h * head_dim + d] += w / total * vd;
                    }
                }
            }
        }
    }
    linear_f64(&attended, &attention.output)
}

/// A layer's attention with the token, as the model runs it: the token prepended, the index
/// and the key mask widened, the table with the token's row.
fn with_token<BK: megagraph_models::GraphAttentionBackend>(
    attention: &GraphAttention<BK>,
    token: &GraphToken<BK>,
    spatial: &SpatialEncoding<BK>,
    problem: &Problem,
    index: BucketIndex<BK>,
) -> Tensor<BK, 3> {
    let device = Default::default();
    let index = token.index(index).unwrap_or_else(|e| panic!("{e}"));
    let keys = token.key_mask(problem.padding(&device));
    attention
        .forward_with(token.prepend(problem.nodes(&device)), spatial_bias(spatial.bias(index), keys), &LocalAttention, 0)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The parts of one attention layer with a token, on `BK`, with a random table.
fn parts<BK: Backend>() -> (GraphAttention<BK>, GraphToken<BK>, SpatialEncoding<BK>) {
    let device = Default::default();
    let attention = GraphAttentionConfig::new(D_MODEL, HEADS).with_block_size(4).init(&device);
    let mut token = GraphTokenConfig::new(D_MODEL, VIRTUAL).init(&device);
    token.embedding = Param::from_tensor(Tensor::random([1, D_MODEL], Distribution::Normal(0.0, 1.0), &device));
    let mut spatial = SpatialEncodingConfig::new(usize::from(FAR) + 1, HEADS).with_graph_token(true).init(&device);
    spatial.table = Param::from_tensor(Tensor::random(
        [usize::from(VIRTUAL) + 1, HEADS],
        Distribution::Normal(0.0, 1.0),
        &device,
    ));
    (attention, token, spatial)
}

#[test]
fn the_token_table_row_starts_one_hop_away() {
    let _turn = crate::turn();
    let spatial = SpatialEncodingConfig::new(4, 3).with_initial_decay(1.5).with_graph_token(true).init::<B>(&Default::default());
    assert_eq!(spatial.num_buckets(), 5);
    let table = values(spatial.table.val());
    assert_eq!(&table[12..], &[-1.5, -1.5, -1.5]);
    let plain = SpatialEncodingConfig::new(4, 3).init::<B>(&Default::default());
    assert_eq!(plain.num_buckets(), 4);
}

#[test]
fn attention_with_the_token_matches_float64_dense_and_sparse() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let (attention, token, spatial) = parts::<B>();
    let token_values = values(token.embedding.val());
    let want = reference(&attention, &problem, &token_values, &values(spatial.table.val()));
    for (name, index) in [("dense", problem.dense(&Default::default())), ("sparse", problem.sparse(&Default::default()))] {
        let got = values(with_token(&attention, &token, &spatial, &problem, index));
        assert_close(&got, &want, 1e-5, name);
    }
}

#[test]
fn gradients_of_the_virtual_distance_and_the_token_match_float64_differences() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let (attention, token, spatial) = parts::<AB>();
    let device = Default::default();
    let weights = Tensor::<AB, 3>::random([BATCH, SEQ + 1, D_MODEL], Distribution::Normal(0.0, 1.0), &device);
    let out = with_token(&attention, &token, &spatial, &problem, problem.dense(&device));
    let grads = (out * weights.clone()).sum().backward();
    let table_grad = values(spatial.table.grad(&grads).unwrap_or_else(|| panic!("no table gradient")));
    let token_grad = values(token.embedding.grad(&grads).unwrap_or_else(|| panic!("no token gradient")));

    let weights = values(weights);
    let (table, token_values) = (values(spatial.table.val()), values(token.embedding.val()));
    let loss = |token: &[f64], table: &[f64]| -> f64 {
        reference(&attention, &problem, token, table).iter().zip(&weights).map(|(o, w)| o * w).sum()
    };
    let step = 1e-6;
    let difference = |f: &dyn Fn(f64) -> f64| (f(step) - f(-step)) / (2.0 * step);
    let virtual_row = usize::from(VIRTUAL) * HEADS;
    for h in 0..HEADS {
        let want = difference(&|e| {
            let mut t = table.clone();
            t[virtual_row + h] += e;
            loss(&token_values, &t)
        });
        assert_close(&[table_grad[virtual_row + h]], &[want], 1e-3, "virtual distance gradient");
    }
    for d in 0..D_MODEL {
        let want = difference(&|e| {
            let mut t = token_values.clone();
            t[d] += e;
            loss(&t, &table)
        });
        assert_close(&[token_grad[d]], &[want], 1e-3, "token embedding gradient");
    }
}

/// A small model with the graph token, its embedding drawn at random (not zero).
/// On the default device.
fn model_with_token() -> megagraph_models::GraphTransformer<B> {
    let device = Default::default();
    let mut model = small_model(BATCH * SEQ, D_MODEL, HEADS, MAX_DISTANCE).with_graph_token(true).init::<B>(&device);
    let token = model.graph_token.as_mut().unwrap_or_else(|| panic!("no graph token"));
    token.embedding = Param::from_tensor(Tensor::random([1, D_MODEL], Distribution::Normal(0.0, 1.0), &device));
    model
}

/// A batch of `problem` with features, degrees 1 and the given index.
fn batch(problem: &Problem, index: BucketIndex<B>) -> GraphBatch<B> {
    let device = Default::default();
    GraphBatch {
        input: NodeInput::Features(problem.nodes(&device)),
        in_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        out_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        distance: index,
        padding: problem.padding(&device),
        edge_paths: None,
        label_input: None,
    }
}

#[test]
fn the_model_with_the_token_agrees_dense_and_sparse_masks_padding_and_drops_the_token() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let device = Default::default();
    let mut model = model_with_token();
    let dense = model.forward(batch(&problem, problem.dense(&device)));
    assert_eq!(dense.dims(), [BATCH, SEQ, 3]);
    let sparse = model.forward(batch(&problem, problem.sparse(&device)));
    assert_close(&values(sparse), &values(dense.clone()), 1e-5, "sparse vs dense logits");

    // new inputs at the padded positions change no real node's logits
    let mut moved = Problem::draw();
    moved.padding = problem.padding.clone();
    for at in (0..BATCH * SEQ).filter(|&at| !problem.padding[at]) {
        moved.nodes[at * D_MODEL..][..D_MODEL].copy_from_slice(&problem.nodes[at * D_MODEL..][..D_MODEL]);
        let (b, i) = (at / SEQ, at % SEQ);
        for j in (0..SEQ).filter(|&j| !problem.padding[b * SEQ + j]) {
            moved.distances[(b * SEQ + i) * SEQ + j] = problem.distances[(b * SEQ + i) * SEQ + j];
        }
    }
    let again = values(model.forward(batch(&moved, moved.dense(&device))));
    let real: Vec<usize> = (0..BATCH * SEQ).filter(|&at| !problem.padding[at]).collect();
    let pick = |logits: &[f64]| real.iter().flat_map(|&at| logits[at * 3..][..3].to_vec()).collect::<Vec<_>>();
    let dense = values(dense);
    assert_close(&pick(&again), &pick(&dense), 1e-5, "real nodes with other padding");

    // the token takes part: the same weights without it give other logits
    model.graph_token = None;
    let without = values(model.forward(batch(&problem, problem.dense(&device))));
    let moved_by_token = dense.iter().zip(&without).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(moved_by_token > 1e-4, "the token changed no logit ({moved_by_token})");
}

#[test]
fn a_mix_of_the_node_rows_runs_before_the_token_joins_them() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let device = Default::default();
    let model = model_with_token();
    let plain = model.forward(batch(&problem, problem.dense(&device)));
    let identity = model
        .forward_mixed_with(batch(&problem, problem.dense(&device)), &LocalAttention, |rows| rows)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_close(&values(identity), &values(plain.clone()), 1e-6, "identity mix vs forward");

    // a mix that moves every row to the next position (cyclically): the nodes' rows change,
    // the token's row (prepended after the mix) does not
    let shift = |rows: Tensor<B, 3>| {
        let [b, s, d] = rows.dims();
        Tensor::cat(vec![rows.clone().slice([0..b, s - 1..s, 0..d]), rows.slice([0..b, 0..s - 1, 0..d])], 1)
    };
    let input = batch(&problem, problem.dense(&device));
    let token = model.graph_token.as_ref().unwrap_or_else(|| panic!("no graph token"));
    let by_hand = model.head(model.forward_layers(token.prepend(shift(model.embed_nodes(&input))), &input, 0..model.layers.len()));
    let mixed = model
        .forward_mixed_with(batch(&problem, problem.dense(&device)), &LocalAttention, shift)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mixed.dims(), [BATCH, SEQ, 3]);
    assert_close(&values(mixed.clone()), &values(by_hand), 1e-6, "mixed vs by hand");
    let moved = values(mixed).iter().zip(values(plain)).any(|(a, b)| (a - b).abs() > 1e-4);
    assert!(moved, "the mix changed no logit");
}

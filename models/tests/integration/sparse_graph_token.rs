//! Sparse edge attention with Graphormer's graph token as TorchGT's global token
//! ([`join_global_token`]) against a float64 dense-masked computation in which every node
//! attends to the token and the token to every node: a layer's output and the gradient of the
//! token's embedding, and the whole model's logits with the float64 core in place of the
//! sparse one. Fresh random inputs and edges on every run.

use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use megagraph_kernels::{AttentionError, DistanceBias, SequenceEdges, join_global_token};
use megagraph_models::encoders::{GraphToken, GraphTokenConfig};
use megagraph_models::{
    Attend, AttendInputs, GraphAttention, GraphAttentionConfig, GraphBatch, NodeInput, SparseAttention, spatial_bias,
};

use crate::common;
use common::{assert_close, linear_f64, small_model, token_qkv_f64, values};

type B = Flex;
type AB = Autodiff<Flex>;

/// Sequences per batch.
const BATCH: usize = 2;
/// Positions of a sequence, padding included.
const SEQ: usize = 7;
/// Heads of the attention layer.
const HEADS: usize = 2;
/// Model width.
const D_MODEL: usize = 8;
/// The nodes of each sequence: the second ends in two padded positions.
const LENS: [usize; BATCH] = [SEQ, SEQ - 2];
/// Positions the layers see: the token, then the nodes.
const WIDE: usize = SEQ + 1;

/// Uniform draws in `[0, high)`.
fn uniform(n: usize, high: f64) -> Vec<f64> {
    values(Tensor::<B, 1>::random(
        [n],
        Distribution::Uniform(0.0, high),
        &Default::default(),
    ))
}

/// A fresh random problem: node inputs and each sequence's edges (a random share of the pairs
/// of its nodes, and a self-loop on every node).
struct Problem {
    /// `[BATCH, SEQ, D_MODEL]` row-major.
    nodes: Vec<f32>,
    /// `(src, dst)` node positions of each sequence.
    edges: Vec<Vec<(u32, u32)>>,
}

impl Problem {
    fn draw() -> Self {
        let nodes = uniform(BATCH * SEQ * D_MODEL, 2.0)
            .into_iter()
            .map(|x| (x - 1.0) as f32)
            .collect();
        let edges = LENS
            .iter()
            .map(|&len| {
                let coins = uniform(len * len, 1.0);
                (0..len * len)
                    .filter(|&at| at / len == at % len || coins[at] < 0.4)
                    .map(|at| ((at / len) as u32, (at % len) as u32))
                    .collect()
            })
            .collect();
        Self { nodes, edges }
    }

    /// Whether query `i` attends to key `j` of sequence `b` (positions with the token at 0):
    /// along an edge `j - 1 → i - 1` between nodes, and between the token and any node or
    /// itself; padding attends to nothing and is not attended.
    fn allowed(&self, b: usize, i: usize, j: usize) -> bool {
        let real = |p: usize| p == 0 || p - 1 < LENS[b];
        match (i, j) {
            (0, _) | (_, 0) => real(i) && real(j),
            _ => self.edges[b].contains(&((j - 1) as u32, (i - 1) as u32)),
        }
    }

    /// The sparse core over the problem's edges with the token joined, on `WIDE` positions.
    fn sparse<BK: Backend>(&self) -> SparseAttention<BK> {
        let lists: Vec<Vec<(u32, u32)>> = self
            .edges
            .iter()
            .zip(LENS)
            .map(|(edges, len)| join_global_token(edges, len))
            .collect();
        SparseAttention::new(SequenceEdges::new(&lists, WIDE, &Default::default()).unwrap_or_else(|e| panic!("{e}")))
    }

    fn nodes<BK: Backend>(&self) -> Tensor<BK, 3> {
        Tensor::from_data(
            TensorData::new(self.nodes.clone(), [BATCH, SEQ, D_MODEL]),
            &Default::default(),
        )
    }

    fn padding<BK: Backend>(&self) -> Tensor<BK, 2, Bool> {
        let padding = (0..BATCH * SEQ).map(|at| at % SEQ >= LENS[at / SEQ]).collect();
        Tensor::from_data(TensorData::new(padding, [BATCH, SEQ]), &Default::default())
    }

    /// Dense-masked sparse attention in float64 over `WIDE` positions: per allowed pair
    /// `exp(clamp(q·k/√d, -5, 5))`, normalized per query with `+1e-6`; `q`, `k`, `v` and the
    /// output `[BATCH, WIDE, HEADS · head_dim]` row-major.
    fn attend_f64(&self, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
        let head_dim = D_MODEL / HEADS;
        let row =
            |t: &[f64], b: usize, i: usize, h: usize| t[(b * WIDE + i) * D_MODEL + h * head_dim..][..head_dim].to_vec();
        let mut out = vec![0.0; BATCH * WIDE * D_MODEL];
        for b in 0..BATCH {
            for h in 0..HEADS {
                for i in 0..WIDE {
                    let qi = row(q, b, i, h);
                    let (mut num, mut den) = (vec![0.0; head_dim], 0.0);
                    for j in (0..WIDE).filter(|&j| self.allowed(b, i, j)) {
                        let dot: f64 = qi.iter().zip(row(k, b, j, h)).map(|(a, c)| a * c).sum();
                        let w = (dot / (head_dim as f64).sqrt()).clamp(-5.0, 5.0).exp();
                        den += w;
                        num.iter_mut().zip(row(v, b, j, h)).for_each(|(n, vd)| *n += w * vd);
                    }
                    for (d, n) in num.iter().enumerate() {
                        out[(b * WIDE + i) * D_MODEL + h * head_dim + d] = n / (den + 1e-6);
                    }
                }
            }
        }
        out
    }

    /// A layer's attention in float64 with the token `token` prepended: the projections, the
    /// dense-masked attention and the output projection, `[BATCH, WIDE, D_MODEL]`.
    fn layer_f64<BK: Backend>(&self, attention: &GraphAttention<BK>, token: &[f64]) -> Vec<f64> {
        let [q, k, v] = token_qkv_f64(attention, &self.nodes, SEQ, token);
        linear_f64(&self.attend_f64(&q, &k, &v), &attention.output)
    }
}

/// A zero distance bias over `WIDE` positions with no key masked: the sparse core reads neither.
fn unread_bias<BK: Backend>() -> megagraph_kernels::AttentionBias<BK> {
    let device = Default::default();
    let distance = DistanceBias {
        index: DistanceBias::<BK>::index_from_u8(vec![0; BATCH * WIDE * WIDE], [BATCH, WIDE, WIDE], &device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into(),
        table: Tensor::zeros([1, HEADS], &device),
        column_offset: 0,
    };
    spatial_bias(
        distance,
        Tensor::from_data(TensorData::new(vec![false; BATCH * WIDE], [BATCH, WIDE]), &device),
    )
}

/// One attention layer and a token of unit-scale embedding, on `BK`.
fn parts<BK: Backend>() -> (GraphAttention<BK>, GraphToken<BK>) {
    let device = Default::default();
    let attention = GraphAttentionConfig::new(D_MODEL, HEADS)
        .with_block_size(4)
        .init(&device);
    let mut token = GraphTokenConfig::new(D_MODEL, 4).init(&device);
    token.embedding = Param::from_tensor(Tensor::random([1, D_MODEL], Distribution::Normal(0.0, 1.0), &device));
    (attention, token)
}

/// A layer's attention over the problem as the model runs it: the token prepended, the sparse
/// core joining it to every node.
fn sparse_layer<BK: megagraph_models::GraphAttentionBackend>(
    problem: &Problem,
    attention: &GraphAttention<BK>,
    token: &GraphToken<BK>,
) -> Tensor<BK, 3> {
    attention
        .forward_with(token.prepend(problem.nodes()), unread_bias(), &problem.sparse(), 0)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_layer_with_the_token_matches_float64_dense_masked_attention() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let (attention, token) = parts::<B>();
    let want = problem.layer_f64(&attention, &values(token.embedding.val()));
    let got = values(sparse_layer(&problem, &attention, &token));
    assert_close(&got, &want, 1e-5, "layer output");
}

#[test]
fn the_token_embedding_gradient_matches_float64_differences() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let (attention, token) = parts::<AB>();
    let weights = Tensor::<AB, 3>::random(
        [BATCH, WIDE, D_MODEL],
        Distribution::Normal(0.0, 1.0),
        &Default::default(),
    );
    let grads = (sparse_layer(&problem, &attention, &token) * weights.clone())
        .sum()
        .backward();
    let got = values(
        token
            .embedding
            .grad(&grads)
            .unwrap_or_else(|| panic!("no token gradient")),
    );
    let (weights, embedding) = (values(weights), values(token.embedding.val()));
    let loss = |token: &[f64]| -> f64 {
        problem
            .layer_f64(&attention, token)
            .iter()
            .zip(&weights)
            .map(|(o, w)| o * w)
            .sum()
    };
    let step = 1e-6;
    for d in 0..D_MODEL {
        let moved = |e: f64| {
            let mut t = embedding.clone();
            t[d] += e;
            loss(&t)
        };
        let want = (moved(step) - moved(-step)) / (2.0 * step);
        assert_close(&[got[d]], &[want], 1e-3, "token embedding gradient");
    }
    assert!(
        got.iter().any(|g| g.abs() > 1e-6),
        "the token reaches the output: {got:?}"
    );
}

/// The float64 dense-masked core of a problem, as an [`Attend`] core of the model.
struct DenseMaskedF64<'a>(&'a Problem);

impl Attend<B> for DenseMaskedF64<'_> {
    type Error = AttentionError;

    fn attend(&self, inputs: AttendInputs<B>, _layer: usize) -> Result<Tensor<B, 4>, AttentionError> {
        // [batch, heads, seq, head_dim] → [batch, seq, heads · head_dim] and back
        let rows = |t: Tensor<B, 4>| values(t.swap_dims(1, 2).reshape([BATCH, WIDE, D_MODEL]));
        let out = self.0.attend_f64(&rows(inputs.q), &rows(inputs.k), &rows(inputs.v));
        let out: Vec<f32> = out.into_iter().map(|x| x as f32).collect();
        let out = Tensor::<B, 3>::from_data(TensorData::new(out, [BATCH, WIDE, D_MODEL]), &Default::default());
        Ok(out.reshape([BATCH, WIDE, HEADS, D_MODEL / HEADS]).swap_dims(1, 2))
    }
}

#[test]
fn the_model_with_the_token_runs_sparse_attention_as_the_float64_core() {
    let _turn = crate::turn();
    let problem = Problem::draw();
    let device = Default::default();
    let mut model = small_model(BATCH * SEQ, D_MODEL, HEADS, 2)
        .with_graph_token(true)
        .init::<B>(&device);
    let token = model.graph_token.as_mut().unwrap_or_else(|| panic!("no graph token"));
    token.embedding = Param::from_tensor(Tensor::random([1, D_MODEL], Distribution::Normal(0.0, 1.0), &device));
    let batch = || GraphBatch {
        input: NodeInput::Features(problem.nodes()),
        in_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        out_degree: Tensor::<B, 2, Int>::ones([BATCH, SEQ], &device),
        distance: DistanceBias::<B>::index_from_u8(vec![0; BATCH * SEQ * SEQ], [BATCH, SEQ, SEQ], &device)
            .unwrap_or_else(|e| panic!("{e}"))
            .into(),
        padding: problem.padding(),
        edge_paths: None,
        label_input: None,
    };
    let sparse = model
        .forward_with(batch(), &problem.sparse::<B>())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sparse.dims(), [BATCH, SEQ, 3]);
    let want = model
        .forward_with(batch(), &DenseMaskedF64(&problem))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_close(&values(sparse.clone()), &values(want), 1e-5, "model logits");

    // the edges without the token, one position short, are a typed error, not a wrong answer
    let plain =
        SparseAttention::new(SequenceEdges::<B>::new(&problem.edges, SEQ, &device).unwrap_or_else(|e| panic!("{e}")));
    assert!(matches!(
        model.forward_with(batch(), &plain),
        Err(AttentionError::ShapeMismatch { tensor: "edges", .. })
    ));
    // and the token takes part: another embedding (not a shift, which the pre-LN undoes) moves
    // the logits
    let token = model.graph_token.as_mut().unwrap_or_else(|| panic!("no graph token"));
    token.embedding = Param::from_tensor(token.embedding.val().flip([1]).mul_scalar(-2.0));
    let moved = values(
        model
            .forward_with(batch(), &problem.sparse::<B>())
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let change = values(sparse)
        .iter()
        .zip(&moved)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(change > 1e-4, "the token changed no logit ({change})");
}

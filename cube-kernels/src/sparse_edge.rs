//! [`sparse_edge_attention`]: TorchGT's sparse attention, each query attending only over the
//! keys joined to it by an edge of its sequence ([`SequenceEdges`]).
//!
//! Per edge `src → dst` and head, `w = exp(clamp(q_dst · k_src · scale, -5, 5))`; per query
//! `out = Σ w · v_src / (Σ w + 1e-6)` over its incoming edges. The clamp stands in for the
//! softmax's max subtraction (as in TorchGT's released code), and a query without edges gets
//! zeros. Written with Burn tensor ops (gather, scatter-add), so it runs on every backend and
//! Burn's autodiff gives its backward; memory is `O(edges · heads · head_dim)`.

use burn::tensor::backend::Backend;
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};
use megagraph_graph::graph::Graph;

use crate::error::AttentionError;

/// The logits are clamped to `[-SCORE_CLAMP, SCORE_CLAMP]` before the exponential.
pub const SCORE_CLAMP: f32 = 5.0;

/// Added to every query's normalizer (so a query without edges reads zeros, not NaN).
pub const NORMALIZER_EPSILON: f32 = 1e-6;

/// The directed edges `src → dst` (positions within a sequence) of each sequence of a batch:
/// query `dst` attends to key `src`. Held as flat row indices of the `[batch · seq]` rows.
#[derive(Clone, Debug)]
pub struct SequenceEdges<B: Backend> {
    /// Row `b · seq + src` of each edge's key, `[edges]`.
    src: Tensor<B, 1, Int>,
    /// Row `b · seq + dst` of each edge's query, `[edges]`.
    dst: Tensor<B, 1, Int>,
    batch: usize,
    seq_len: usize,
    count: usize,
}

impl<B: Backend> SequenceEdges<B> {
    /// The edges `edges[b]` (`(src, dst)` positions) of batch element `b`, for sequences of
    /// `seq_len` positions. An edge given twice counts twice.
    ///
    /// # Errors
    /// [`AttentionError::EdgeOutOfRange`] naming the batch element and edge whose position is
    /// not below `seq_len`.
    pub fn new(edges: &[Vec<(u32, u32)>], seq_len: usize, device: &B::Device) -> Result<Self, AttentionError> {
        let count = edges.iter().map(Vec::len).sum();
        let (mut src, mut dst) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for (b, list) in edges.iter().enumerate() {
            for (edge, &(s, d)) in list.iter().enumerate() {
                if let Some(position) = [s, d].into_iter().find(|&p| p as usize >= seq_len) {
                    return Err(AttentionError::EdgeOutOfRange {
                        batch: b,
                        edge,
                        position: position as usize,
                        seq_len,
                    });
                }
                src.push((b * seq_len + s as usize) as i64);
                dst.push((b * seq_len + d as usize) as i64);
            }
        }
        let ints = |values: Vec<i64>| Tensor::from_data(TensorData::new(values, [count]), device);
        Ok(Self {
            src: ints(src),
            dst: ints(dst),
            batch: edges.len(),
            seq_len,
            count,
        })
    }

    /// TorchGT's edges of each sequence `sequences[b]` (node ids of `graph`, at positions
    /// `0..len`): the arcs of its induced subgraph and a self-loop per node when `self_loops`;
    /// with `global_token`, those edges joined to a global token at position 0
    /// ([`join_global_token`]: node `i` moves to position `i + 1`), so sequences need
    /// `len + 1 ≤ seq_len` positions then.
    ///
    /// # Errors
    /// [`AttentionError::EdgeOutOfRange`] when a sequence (with its token) does not fit in
    /// `seq_len`.
    pub fn induced(
        graph: &Graph,
        sequences: &[&[u32]],
        seq_len: usize,
        self_loops: bool,
        global_token: bool,
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        let mut position = vec![u32::MAX; graph.num_nodes()];
        let edges: Vec<Vec<(u32, u32)>> = sequences
            .iter()
            .map(|members| {
                for (i, &node) in members.iter().enumerate() {
                    position[node as usize] = i as u32;
                }
                let mut list = Vec::new();
                for (i, &node) in members.iter().enumerate() {
                    let dst = i as u32;
                    // graph arcs are sorted and unique, so each pair comes once
                    for &neighbour in graph.neighbors(node) {
                        let src = position[neighbour as usize];
                        if src != u32::MAX && src != dst {
                            list.push((src, dst));
                        }
                    }
                    if self_loops {
                        list.push((dst, dst));
                    }
                }
                for &node in members.iter() {
                    position[node as usize] = u32::MAX;
                }
                if global_token { join_global_token(&list, members.len()) } else { list }
            })
            .collect();
        Self::new(&edges, seq_len, device)
    }

    /// Number of edges over the batch.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there is no edge.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The edges `edges` (`(src, dst)` positions of a sequence of `len` nodes) joined to a global
/// token at position 0, where the model's graph token (Graphormer's,
/// `megagraph_models::encoders::GraphToken`) sits: node `i` moves to position `i + 1` (every
/// edge moves up one position), and the token is joined both ways to each of the `len` nodes
/// and to itself; padding past `len` stays unjoined. The one layout of TorchGT's global token, for [`SequenceEdges::induced`] and the
/// model's sparse steps alike; build the [`SequenceEdges`] for sequences one position longer.
pub fn join_global_token(edges: &[(u32, u32)], len: usize) -> Vec<(u32, u32)> {
    let mut joined = Vec::with_capacity(edges.len() + 2 * len + 1);
    joined.extend(edges.iter().map(|&(src, dst)| (src + 1, dst + 1)));
    joined.extend((1..=len as u32).flat_map(|node| [(0, node), (node, 0)]));
    joined.push((0, 0));
    joined
}

/// Sparse attention over `edges`: for each head, each query attends to the keys of its incoming
/// edges (see the [module](self) for the formula).
///
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`
/// - `scale`: the logits' scale, `1/√head_dim` when `None`
/// - output: `[batch, heads, seq, head_dim]`
///
/// # Errors
/// [`AttentionError::ShapeMismatch`] when `k`, `v` or the edges' batch and sequence length
/// disagree with `q`; [`AttentionError::NonFiniteScale`] for a scale that is not finite.
pub fn sparse_edge_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    edges: &SequenceEdges<B>,
    scale: Option<f32>,
) -> Result<Tensor<B, 4>, AttentionError> {
    let [batch, heads, seq, head_dim] = q.dims();
    for (tensor, t) in [("k", &k), ("v", &v)] {
        for (dim, (expected, actual)) in ["batch", "heads", "seq", "head_dim"].into_iter().zip(q.dims().into_iter().zip(t.dims())) {
            if expected != actual {
                return Err(AttentionError::ShapeMismatch { tensor, dim, expected, actual, shape: t.dims().to_vec() });
            }
        }
    }
    for (dim, expected, actual) in [("batch", batch, edges.batch), ("seq", seq, edges.seq_len)] {
        if expected != actual {
            return Err(AttentionError::ShapeMismatch { tensor: "edges", dim, expected, actual, shape: vec![edges.batch, edges.seq_len] });
        }
    }
    let scale = scale.unwrap_or(1.0 / (head_dim as f32).sqrt());
    if !scale.is_finite() {
        return Err(AttentionError::NonFiniteScale(scale));
    }
    let rows = |t: Tensor<B, 4>| t.swap_dims(1, 2).reshape([batch * seq, heads, head_dim]);
    let (q, k, v) = (rows(q), rows(k), rows(v));
    let device = q.device();
    // per edge and head: [edges, heads, head_dim] gathers, [edges, heads, 1] weights
    let queries = q.select(0, edges.dst.clone());
    let keys = k.select(0, edges.src.clone());
    let values = v.select(0, edges.src.clone());
    let weights = (queries * keys)
        .sum_dim(2)
        .mul_scalar(scale)
        .clamp(-SCORE_CLAMP, SCORE_CLAMP)
        .exp();
    let numerator = Tensor::<B, 3>::zeros([batch * seq, heads, head_dim], &device).select_assign(
        0,
        edges.dst.clone(),
        weights.clone() * values,
        IndexingUpdateOp::Add,
    );
    let normalizer = Tensor::<B, 3>::zeros([batch * seq, heads, 1], &device).select_assign(
        0,
        edges.dst.clone(),
        weights,
        IndexingUpdateOp::Add,
    );
    let out = numerator / normalizer.add_scalar(NORMALIZER_EPSILON);
    Ok(out.reshape([batch, seq, heads, head_dim]).swap_dims(1, 2))
}

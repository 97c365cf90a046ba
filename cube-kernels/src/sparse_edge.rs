//! [`sparse_edge_attention`]: TorchGT's sparse attention, each query attending only over the
//! keys joined to it by an edge of its sequence ([`SequenceEdges`]).
//!
//! Per edge `src → dst` and head, `w = exp(clamp(q_dst · k_src · scale, -5, 5))`; per query
//! `out = Σ w · v_src / (Σ w + 1e-6)` over its incoming edges. The clamp stands in for the
//! softmax's max subtraction (as in TorchGT's released code), and a query without edges gets
//! zeros. It is an op of [`GraphAttentionBackend`] with its own backward: the default is the
//! [reference](crate::reference::sparse_edge) with Burn tensor ops (gather, scatter-add, memory
//! `O(edges · heads · head_dim)`), `Flex` runs a fused CPU path over the edges grouped per row
//! ([`HostEdges`]), and on [`Autodiff`](burn::backend::Autodiff) a custom backward node calls the
//! inner backend's backward.

use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use megagraph_graph::graph::Graph;

use crate::backend::GraphAttentionBackend;
use crate::edge_csr::HostEdges;
use crate::error::AttentionError;
use crate::primitives::SparseEdgeInputs;

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
    /// The same edges on the host, grouped by row (shared by clones).
    host: Arc<HostEdges>,
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
                src.push((b * seq_len + s as usize) as u32);
                dst.push((b * seq_len + d as usize) as u32);
            }
        }
        let host = Arc::new(HostEdges::new(edges.len() * seq_len, &src, &dst));
        let ints = |values: Vec<u32>| {
            let values: Vec<i64> = values.into_iter().map(i64::from).collect();
            Tensor::from_data(TensorData::new(values, [count]), device)
        };
        Ok(Self {
            src: ints(src),
            dst: ints(dst),
            host,
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

    /// The edges on the host, grouped by destination and by source row.
    pub fn host(&self) -> &HostEdges {
        &self.host
    }

    /// The primitive-level inputs of sparse edge attention over these edges, for
    /// [`GraphAttentionBackend::sparse_edge_attention_forward`]: `q`, `k`, `v` as
    /// `[batch, heads, seq, head_dim]` with this batch and sequence length (not checked here;
    /// [`sparse_edge_attention`] checks them).
    pub fn inputs(&self, q: Tensor<B, 4>, k: Tensor<B, 4>, v: Tensor<B, 4>, scale: f32) -> SparseEdgeInputs<B> {
        SparseEdgeInputs {
            q: q.into_primitive().tensor(),
            k: k.into_primitive().tensor(),
            v: v.into_primitive().tensor(),
            src: self.src.clone().into_primitive(),
            dst: self.dst.clone().into_primitive(),
            host: self.host.clone(),
            scale,
        }
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
pub fn sparse_edge_attention<B: GraphAttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    edges: &SequenceEdges<B>,
    scale: Option<f32>,
) -> Result<Tensor<B, 4>, AttentionError> {
    let [batch, _, seq, head_dim] = q.dims();
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
    let out = B::sparse_edge_attention_forward(edges.inputs(q, k, v, scale)).out;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

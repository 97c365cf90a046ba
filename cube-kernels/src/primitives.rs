//! The op's inputs and gradients at the level of tensor primitives, as
//! [`GraphAttentionBackend`](crate::GraphAttentionBackend) takes and returns them.

use burn::tensor::backend::Backend;
use std::sync::Arc;

use burn::tensor::ops::{BoolTensor, FloatTensor, IntTensor};

use crate::edge_csr::HostEdges;

use crate::index::BucketIndexPrimitive;

/// Distance bias at the primitive level (see [`DistanceBias`](crate::DistanceBias)).
#[derive(Clone, Debug)]
pub struct DistanceBiasPrimitive<B: Backend> {
    /// The bucket of every pair over `[batch, q_len, total_k_len]`, dense or sparse.
    pub index: BucketIndexPrimitive<B>,
    /// `[buckets, heads]` float table.
    pub table: FloatTensor<B>,
    /// First index column of the key block.
    pub column_offset: usize,
}

/// Validated inputs of the op at the primitive level.
///
/// [`graph_attention`](crate::graph_attention) builds it after checking every shape, so
/// implementations may assume consistent shapes:
/// `q [batch, heads, q_len, head_dim]`, `k`/`v [batch, heads, k_len, head_dim]`,
/// `dense [batch, heads, q_len, k_len]`, `key_padding_mask [batch, k_len]`, and
/// `column_offset + k_len <= total_k_len`.
#[derive(Clone, Debug)]
pub struct GraphAttentionInputs<B: Backend> {
    /// Queries `[batch, heads, q_len, head_dim]`.
    pub q: FloatTensor<B>,
    /// Keys `[batch, heads, k_len, head_dim]`.
    pub k: FloatTensor<B>,
    /// Values `[batch, heads, k_len, head_dim]`.
    pub v: FloatTensor<B>,
    /// Spatial bias through a distance index, if any.
    pub distance: Option<DistanceBiasPrimitive<B>>,
    /// Dense bias `[batch, heads, q_len, k_len]`, if any.
    pub dense: Option<FloatTensor<B>>,
    /// Key padding mask `[batch, k_len]` (`true` = masked out), if any.
    pub key_padding_mask: Option<BoolTensor<B>>,
    /// Factor applied to `q·kᵀ` before the bias is added.
    pub scale: f32,
    /// Number of keys per tile (positive).
    pub block_size: usize,
}

/// Gradients of the op's differentiable inputs.
#[derive(Clone, Debug)]
pub struct GraphAttentionGrads<B: Backend> {
    /// `[batch, heads, q_len, head_dim]`.
    pub q: FloatTensor<B>,
    /// `[batch, heads, k_len, head_dim]`.
    pub k: FloatTensor<B>,
    /// `[batch, heads, k_len, head_dim]`.
    pub v: FloatTensor<B>,
    /// `[buckets, heads]`, present iff the inputs had a distance bias.
    pub table: Option<FloatTensor<B>>,
    /// `[batch, heads, q_len, k_len]`, present iff the inputs had a dense bias.
    pub dense: Option<FloatTensor<B>>,
}

/// Validated inputs of sparse edge attention at the primitive level, as
/// [`sparse_edge_attention_forward`](crate::GraphAttentionBackend::sparse_edge_attention_forward)
/// takes them.
///
/// [`sparse_edge_attention`](crate::sparse_edge_attention) builds it after checking every shape:
/// `q`, `k`, `v` are `[batch, heads, seq, head_dim]`, and the edges join rows `b · seq + p` of
/// the same batch element `b`.
#[derive(Clone, Debug)]
pub struct SparseEdgeInputs<B: Backend> {
    /// Queries `[batch, heads, seq, head_dim]`.
    pub q: FloatTensor<B>,
    /// Keys `[batch, heads, seq, head_dim]`.
    pub k: FloatTensor<B>,
    /// Values `[batch, heads, seq, head_dim]`.
    pub v: FloatTensor<B>,
    /// Row `b · seq + src` of each edge's key, `[edges]`.
    pub src: IntTensor<B>,
    /// Row `b · seq + dst` of each edge's query, `[edges]`.
    pub dst: IntTensor<B>,
    /// The same edges on the host, grouped by destination and by source row.
    pub host: Arc<HostEdges>,
    /// Factor applied to `q·k` before the clamp.
    pub scale: f32,
}

/// Result of sparse edge attention's forward pass.
#[derive(Clone, Debug)]
pub struct SparseEdgeOutput<B: Backend> {
    /// `out = Σ w · v_src / (Σ w + ε)`, `[batch, heads, seq, head_dim]`.
    pub out: FloatTensor<B>,
    /// The normalizer `Σ w + ε` of each (query, head), `[batch, heads, seq]`, what the backward
    /// pass divides by.
    pub normalizer: FloatTensor<B>,
}

/// Gradients of sparse edge attention's inputs, each of its input's shape.
#[derive(Clone, Debug)]
pub struct SparseEdgeGrads<B: Backend> {
    /// `[batch, heads, seq, head_dim]`.
    pub q: FloatTensor<B>,
    /// `[batch, heads, seq, head_dim]`.
    pub k: FloatTensor<B>,
    /// `[batch, heads, seq, head_dim]`.
    pub v: FloatTensor<B>,
}

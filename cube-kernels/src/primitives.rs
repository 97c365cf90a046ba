//! The op's inputs and gradients at the level of tensor primitives, as
//! [`GraphAttentionBackend`](crate::GraphAttentionBackend) takes and returns them.

use burn::tensor::backend::Backend;
use burn::tensor::ops::{BoolTensor, FloatTensor};

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

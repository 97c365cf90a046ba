//! The backend extension: the op at the level of tensor primitives, which backends may override
//! with their own kernels.

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;

use crate::primitives::{
    GraphAttentionGrads, GraphAttentionInputs, SparseEdgeGrads, SparseEdgeInputs, SparseEdgeOutput,
};
use crate::reference;

/// A backend that can run exact blockwise biased graph attention.
///
/// The default methods are the reference implementation: a loop over key tiles written with
/// Burn tensor ops (matmul, exp, max, select, select_assign), so every backend gets the op with
/// `impl GraphAttentionBackend for MyBackend {}`. A backend with its own kernels overrides both
/// methods; [`Autodiff`](burn::backend::Autodiff) overrides the forward pass to register a custom
/// backward node that calls [`graph_attention_backward`](Self::graph_attention_backward) of the
/// inner backend.
///
/// Logits are `s = scale · q·kᵀ + bias` with masked keys at `-inf`; the op returns
/// `out = softmax(s) · v` and `lse = logsumexp(s)` per row. A row whose keys are all masked gets
/// `out = 0`, `lse = -inf`.
pub trait GraphAttentionBackend: Backend {
    /// Forward pass. Returns the packed result `[batch, heads, q_len, head_dim + 1]`: channels
    /// `0..head_dim` hold the output, channel `head_dim` holds the row's log-sum-exp. Its dtype is
    /// [`compute_dtype`](crate::compute_dtype) of the inputs' (`f32` for `f16` / `bf16` inputs)
    /// on the reference and the Flex implementations.
    ///
    /// Memory: `O(q_len · head_dim + q_len · block_size · heads)` per batch element beyond the
    /// inputs.
    fn graph_attention_forward(inputs: GraphAttentionInputs<Self>) -> FloatTensor<Self> {
        reference::forward::<Self>(inputs)
    }

    /// Backward pass. `packed_output` is the result of the forward pass and `packed_grad` the
    /// gradient of the loss with respect to it (same packed layout: `dO` then `dLSE`).
    ///
    /// Recomputes the probabilities one key tile at a time from the saved log-sum-exp, so it
    /// never holds a `[q_len, k_len]` matrix. Each gradient has the dtype of its input.
    fn graph_attention_backward(
        inputs: GraphAttentionInputs<Self>,
        packed_output: FloatTensor<Self>,
        packed_grad: FloatTensor<Self>,
    ) -> GraphAttentionGrads<Self> {
        reference::backward::<Self>(inputs, packed_output, packed_grad)
    }

    /// Sparse edge attention's forward pass (TorchGT's mode, see
    /// [`sparse_edge_attention`](crate::sparse_edge_attention)): the output and the normalizer
    /// `Σ w + ε` of each (query, head), which the backward pass reuses.
    ///
    /// The default is [`reference::sparse_edge::forward`], written with Burn tensor ops.
    fn sparse_edge_attention_forward(inputs: SparseEdgeInputs<Self>) -> SparseEdgeOutput<Self> {
        reference::sparse_edge::forward::<Self>(inputs)
    }

    /// Sparse edge attention's backward pass. `output` is the forward pass's result and `grad`
    /// the gradient of the loss with respect to its `out`; each gradient has its input's dtype.
    ///
    /// The default is [`reference::sparse_edge::backward`], which recomputes the per-edge
    /// weights with Burn tensor ops.
    fn sparse_edge_attention_backward(
        inputs: SparseEdgeInputs<Self>,
        output: SparseEdgeOutput<Self>,
        grad: FloatTensor<Self>,
    ) -> SparseEdgeGrads<Self> {
        reference::sparse_edge::backward::<Self>(inputs, output, grad)
    }
}

/// An autodiff backend whose inner backend also runs the op (what training code bounds on).
pub trait GraphAttentionAutodiffBackend:
    GraphAttentionBackend + AutodiffBackend<InnerBackend: GraphAttentionBackend>
{
}

impl<B> GraphAttentionAutodiffBackend for B where
    B: GraphAttentionBackend + AutodiffBackend<InnerBackend: GraphAttentionBackend>
{
}

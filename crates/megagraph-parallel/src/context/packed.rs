//! The packed `[.., head_dim + 1]` layout (output, then log-sum-exp) and the conversions
//! between tensors and primitives.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};
use megagraph_kernels::AttentionOutput;

pub(super) fn float<B: Backend, const D: usize>(primitive: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

pub(super) fn primitive<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// Splits a packed `[.., head_dim + 1]` result into output and log-sum-exp.
pub(super) fn unpack<B: Backend>(packed: Tensor<B, 4>) -> AttentionOutput<B> {
    let [batch, heads, len, width] = packed.dims();
    let head_dim = width - 1;
    AttentionOutput {
        output: packed
            .clone()
            .slice([0..batch, 0..heads, 0..len, 0..head_dim]),
        lse: packed
            .slice([0..batch, 0..heads, 0..len, head_dim..width])
            .reshape([batch, heads, len]),
    }
}

/// The packed layout of an [`AttentionOutput`].
pub(super) fn pack<B: Backend>(result: AttentionOutput<B>) -> Tensor<B, 4> {
    Tensor::cat(vec![result.output, result.lse.unsqueeze_dim(3)], 3)
}

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
    AttentionOutput::from_packed(packed)
}

/// The packed layout of an [`AttentionOutput`].
pub(super) fn pack<B: Backend>(result: AttentionOutput<B>) -> Tensor<B, 4> {
    result.into_packed()
}

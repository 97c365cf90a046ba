//! Half-precision inputs: the op computes `f16` and `bf16` inputs in `f32`.
//!
//! [`widen_inputs`] casts half-precision q, k, v, table and dense bias to `f32` before a backend
//! implementation runs (other dtypes pass unchanged), so every sum, the running maximum and the
//! log-sum-exp are `f32`; the packed forward result is then `f32`. [`narrow_grads`] casts the
//! gradients back to the dtypes the inputs had.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, FloatDType, TensorMetadata};

use crate::primitives::{DistanceBiasPrimitive, GraphAttentionGrads, GraphAttentionInputs};

/// The dtype the op computes in for inputs of `dtype`: `f32` for `f16` and `bf16`, `dtype`
/// itself otherwise. The packed result of
/// [`graph_attention_forward`](crate::GraphAttentionBackend::graph_attention_forward) and the
/// log-sum-exp of [`graph_attention`](crate::graph_attention) have this dtype.
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// `tensor` in its [`compute_dtype`] (unchanged, without a copy, when that is its own dtype).
pub(crate) fn widen<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    let dtype = tensor.dtype();
    let wide = compute_dtype(dtype);
    if wide == dtype {
        tensor
    } else {
        B::float_cast(tensor, FloatDType::from(wide))
    }
}

/// `tensor` cast to `dtype` unless it already has it.
pub(crate) fn narrow<B: Backend>(tensor: FloatTensor<B>, dtype: DType) -> FloatTensor<B> {
    if tensor.dtype() == dtype {
        tensor
    } else {
        B::float_cast(tensor, FloatDType::from(dtype))
    }
}

/// The dtypes of the op's differentiable inputs as the caller gave them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputDTypes {
    q: DType,
    k: DType,
    v: DType,
    table: Option<DType>,
    dense: Option<DType>,
}

/// `inputs` with every float tensor in its [`compute_dtype`], and the dtypes they had.
pub(crate) fn widen_inputs<B: Backend>(inputs: GraphAttentionInputs<B>) -> (GraphAttentionInputs<B>, InputDTypes) {
    let dtypes = InputDTypes {
        q: inputs.q.dtype(),
        k: inputs.k.dtype(),
        v: inputs.v.dtype(),
        table: inputs.distance.as_ref().map(|d| d.table.dtype()),
        dense: inputs.dense.as_ref().map(|d| d.dtype()),
    };
    let wide = GraphAttentionInputs {
        q: widen::<B>(inputs.q),
        k: widen::<B>(inputs.k),
        v: widen::<B>(inputs.v),
        distance: inputs.distance.map(|d| DistanceBiasPrimitive {
            index: d.index,
            table: widen::<B>(d.table),
            column_offset: d.column_offset,
        }),
        dense: inputs.dense.map(widen::<B>),
        key_padding_mask: inputs.key_padding_mask,
        scale: inputs.scale,
        block_size: inputs.block_size,
    };
    (wide, dtypes)
}

/// `grads` cast back to the dtypes of the inputs they belong to.
pub(crate) fn narrow_grads<B: Backend>(grads: GraphAttentionGrads<B>, dtypes: InputDTypes) -> GraphAttentionGrads<B> {
    GraphAttentionGrads {
        q: narrow::<B>(grads.q, dtypes.q),
        k: narrow::<B>(grads.k, dtypes.k),
        v: narrow::<B>(grads.v, dtypes.v),
        table: match (grads.table, dtypes.table) {
            (Some(g), Some(dtype)) => Some(narrow::<B>(g, dtype)),
            (g, _) => g,
        },
        dense: match (grads.dense, dtypes.dense) {
            (Some(g), Some(dtype)) => Some(narrow::<B>(g, dtype)),
            (g, _) => g,
        },
    }
}

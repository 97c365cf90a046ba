//! The front door of the op: shape checks, option resolution, and unpacking of the result.

use burn::tensor::Tensor;

use crate::backend::GraphAttentionBackend;
use crate::primitives::{DistanceBiasPrimitive, GraphAttentionInputs};
use crate::error::check_dims;
use crate::reference::{float, primitive};
use crate::{AttentionBias, AttentionError, BucketIndex};

/// Options of [`graph_attention`].
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionOptions {
    /// Factor applied to `q·kᵀ`. Default `None`: `1 / sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// Number of keys per tile. Default 128. Bounds the op's working memory, not its result.
    pub block_size: usize,
}

impl Default for AttentionOptions {
    fn default() -> Self {
        Self {
            scale: None,
            block_size: 128,
        }
    }
}

/// Result of [`graph_attention`] over one block of keys.
#[derive(Clone, Debug)]
pub struct AttentionOutput<B: burn::tensor::backend::Backend> {
    /// `softmax(logits) · v`: `[batch, heads, q_len, head_dim]`. Zero for rows without a visible key.
    /// From [`graph_attention`], in the inputs' dtype; from [`Self::from_packed`], in the packed
    /// result's.
    pub output: Tensor<B, 4>,
    /// Log-sum-exp of each row's logits: `[batch, heads, q_len]`. `-inf` for rows without a
    /// visible key. In the dtype the op computes in ([`compute_dtype`](crate::compute_dtype) of
    /// the inputs' dtype): `f32` for `f32`, `f16` and `bf16` inputs.
    pub lse: Tensor<B, 3>,
}

impl<B: burn::tensor::backend::Backend> AttentionOutput<B> {
    /// Splits the op's packed result `[batch, heads, q_len, head_dim + 1]` (the output, then the
    /// log-sum-exp) into output and log-sum-exp.
    pub fn from_packed(packed: Tensor<B, 4>) -> Self {
        let [batch, heads, q_len, width] = packed.dims();
        let head_dim = width - 1;
        Self {
            output: packed
                .clone()
                .slice([0..batch, 0..heads, 0..q_len, 0..head_dim]),
            lse: packed
                .slice([0..batch, 0..heads, 0..q_len, head_dim..width])
                .reshape([batch, heads, q_len]),
        }
    }

    /// The packed layout of [`Self::from_packed`].
    pub fn into_packed(self) -> Tensor<B, 4> {
        Tensor::cat(vec![self.output, self.lse.unsqueeze_dim::<4>(3)], 3)
    }
}

/// Exact biased attention over one block of keys, computed tile by tile with an online softmax.
///
/// - `q`: `[batch, heads, q_len, head_dim]`
/// - `k`, `v`: `[batch, heads, k_len, head_dim]`
/// - `bias`: distance bias (index over `[batch, q_len, total_k_len]`, dense or sparse, table
///   `[buckets, heads]`), dense
///   bias `[batch, heads, q_len, k_len]`, key padding mask `[batch, k_len]` — all optional.
/// - returns `output [batch, heads, q_len, head_dim]` and `lse [batch, heads, q_len]`.
///
/// Dtypes: q, k, v, the table and the dense bias share one float dtype. `f16` and `bf16` inputs
/// are computed in `f32` (every sum, the running maximum and the log-sum-exp); the output comes
/// back in the inputs' dtype, the log-sum-exp in `f32`, and the gradients in their inputs'
/// dtypes.
///
/// Logits are `scale · q·kᵀ + table[index[b, i, column_offset + j], h] + dense[b, h, i, j]`,
/// masked keys excluded. Differentiable in `q`, `k`, `v`, the table and the dense bias through
/// both outputs; on [`Autodiff`](burn::backend::Autodiff) the backward pass recomputes the
/// probabilities instead of storing them.
///
/// # Errors
///
/// [`AttentionError::ShapeMismatch`] or [`AttentionError::EmptyDimension`] naming the tensor and
/// dimension that disagree, [`AttentionError::DTypeMismatch`] naming a float input whose dtype
/// is not `q`'s, [`AttentionError::ColumnOffsetOutOfRange`] when
/// `column_offset + k_len` exceeds the index, [`AttentionError::ZeroBlockSize`],
/// [`AttentionError::NonFiniteScale`]. Bucket values are not checked here (that needs a device
/// read); see [`DistanceBias::check_bucket_range`](crate::DistanceBias::check_bucket_range).
pub fn graph_attention<B: GraphAttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    bias: AttentionBias<B>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<B>, AttentionError> {
    let [batch, heads, q_len, head_dim] = q.dims();
    let q_shape = q.dims().to_vec();
    for (dim, size) in [
        ("batch", batch),
        ("heads", heads),
        ("q_len", q_len),
        ("head_dim", head_dim),
    ] {
        if size == 0 {
            return Err(AttentionError::EmptyDimension {
                tensor: "q",
                dim,
                shape: q_shape,
            });
        }
    }
    let k_len = k.dims()[2];
    check_dims(
        "k",
        &k.dims(),
        &[
            ("batch", batch),
            ("heads", heads),
            ("k_len", k_len),
            ("head_dim", head_dim),
        ],
    )?;
    check_dims(
        "v",
        &v.dims(),
        &[
            ("batch", batch),
            ("heads", heads),
            ("k_len", k_len),
            ("head_dim", head_dim),
        ],
    )?;
    if k_len == 0 {
        return Err(AttentionError::EmptyDimension {
            tensor: "k",
            dim: "k_len",
            shape: k.dims().to_vec(),
        });
    }
    if let Some(distance) = &bias.distance {
        let index_dims = distance.index.dims();
        let total_k_len = index_dims[2];
        check_dims(
            "bias.distance.index",
            &index_dims,
            &[
                ("batch", batch),
                ("q_len", q_len),
                ("total_k_len", total_k_len),
            ],
        )?;
        let table_dims = distance.table.dims();
        check_dims(
            "bias.distance.table",
            &table_dims,
            &[("buckets", table_dims[0]), ("heads", heads)],
        )?;
        if table_dims[0] == 0 {
            return Err(AttentionError::EmptyDimension {
                tensor: "bias.distance.table",
                dim: "buckets",
                shape: table_dims.to_vec(),
            });
        }
        if let BucketIndex::Sparse(sparse) = &distance.index {
            let stored = sparse.columns.dims()[0];
            check_dims(
                "bias.distance.index.buckets",
                &sparse.buckets.dims(),
                &[("stored", stored)],
            )?;
            check_dims(
                "bias.distance.index.row_offsets",
                &sparse.row_offsets.dims(),
                &[("batch", batch), ("q_len + 1", q_len + 1)],
            )?;
            if sparse.far_bucket >= table_dims[0] || sparse.far_bucket > usize::from(u8::MAX) {
                return Err(AttentionError::BucketOutOfRange {
                    value: sparse.far_bucket as i64,
                    buckets: table_dims[0].min(usize::from(u8::MAX) + 1),
                });
            }
        }
        if distance.column_offset + k_len > total_k_len {
            return Err(AttentionError::ColumnOffsetOutOfRange {
                column_offset: distance.column_offset,
                k_len,
                total_k_len,
            });
        }
    }
    if let Some(dense) = &bias.dense {
        check_dims(
            "bias.dense",
            &dense.dims(),
            &[
                ("batch", batch),
                ("heads", heads),
                ("q_len", q_len),
                ("k_len", k_len),
            ],
        )?;
    }
    if let Some(mask) = &bias.key_padding_mask {
        check_dims(
            "bias.key_padding_mask",
            &mask.dims(),
            &[("batch", batch), ("k_len", k_len)],
        )?;
    }
    let dtype = q.dtype();
    let float_inputs = [
        ("k", Some(k.dtype())),
        ("v", Some(v.dtype())),
        ("bias.distance.table", bias.distance.as_ref().map(|d| d.table.dtype())),
        ("bias.dense", bias.dense.as_ref().map(|d| d.dtype())),
    ];
    for (tensor, actual) in float_inputs {
        if let Some(actual) = actual
            && actual != dtype
        {
            return Err(AttentionError::DTypeMismatch {
                tensor,
                expected: dtype,
                actual,
            });
        }
    }
    if options.block_size == 0 {
        return Err(AttentionError::ZeroBlockSize);
    }
    let scale = options.scale.unwrap_or(1.0 / (head_dim as f32).sqrt());
    if !scale.is_finite() {
        return Err(AttentionError::NonFiniteScale(scale));
    }

    let inputs = GraphAttentionInputs::<B> {
        q: primitive(q),
        k: primitive(k),
        v: primitive(v),
        distance: bias.distance.map(|d| DistanceBiasPrimitive {
            index: d.index.into_primitive(),
            table: primitive(d.table),
            column_offset: d.column_offset,
        }),
        dense: bias.dense.map(primitive),
        key_padding_mask: bias.key_padding_mask.map(|m| m.into_primitive()),
        scale,
        block_size: options.block_size,
    };
    let mut result = AttentionOutput::from_packed(float(B::graph_attention_forward(inputs)));
    if result.output.dtype() != dtype {
        // half-precision inputs: computed in f32 (see `compute_dtype`), output in their dtype
        result.output = result.output.cast(dtype);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::Bool;

    type B = Flex;

    fn qkv(q: [usize; 4], k: [usize; 4]) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let device = Default::default();
        (
            Tensor::ones(q, &device),
            Tensor::ones(k, &device),
            Tensor::ones(k, &device),
        )
    }

    #[test]
    fn head_dim_mismatch_names_tensor_and_dim() {
        let (q, k, _) = qkv([1, 2, 3, 4], [1, 2, 5, 4]);
        let v = Tensor::<B, 4>::ones([1, 2, 5, 6], &Default::default());
        let err = graph_attention(
            q,
            k,
            v,
            AttentionBias::default(),
            &AttentionOptions::default(),
        )
        .err();
        assert_eq!(
            err,
            Some(AttentionError::ShapeMismatch {
                tensor: "v",
                dim: "head_dim",
                expected: 4,
                actual: 6,
                shape: vec![1, 2, 5, 6],
            })
        );
    }

    #[test]
    fn mask_length_mismatch_is_reported() {
        let (q, k, v) = qkv([2, 1, 3, 4], [2, 1, 5, 4]);
        let bias = AttentionBias {
            key_padding_mask: Some(Tensor::<B, 2, Bool>::empty([2, 4], &Default::default())),
            ..Default::default()
        };
        let err = graph_attention(q, k, v, bias, &AttentionOptions::default()).err();
        assert!(matches!(
            err,
            Some(AttentionError::ShapeMismatch {
                tensor: "bias.key_padding_mask",
                dim: "k_len",
                expected: 5,
                actual: 4,
                ..
            })
        ));
    }

    #[test]
    fn zero_block_size_and_bad_scale_are_rejected() {
        let (q, k, v) = qkv([1, 1, 2, 4], [1, 1, 2, 4]);
        let options = AttentionOptions {
            scale: None,
            block_size: 0,
        };
        let err = graph_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            AttentionBias::default(),
            &options,
        )
        .err();
        assert_eq!(err, Some(AttentionError::ZeroBlockSize));
        let options = AttentionOptions {
            scale: Some(f32::NAN),
            block_size: 4,
        };
        let err = graph_attention(q, k, v, AttentionBias::default(), &options).err();
        assert!(matches!(err, Some(AttentionError::NonFiniteScale(s)) if s.is_nan()));
    }
}

//! [`ring_attention`]: the tensor-level entry point of context parallelism.

use std::sync::Arc;

use burn::tensor::Tensor;
use megagraph_kernels::{
    AttentionError, AttentionOutput, DistanceBiasPrimitive, GraphAttentionInputs,
};
use megagraph_models::AttendInputs;

use super::backend::ContextParallelBackend;
use super::endpoint::RingEndpoint;
use super::message::RingCall;
use super::packed::{float, primitive, unpack};
use crate::ParallelError;

/// Exact biased attention of this ring position's queries over the whole sequence.
///
/// `inputs` (the model's [`AttendInputs`]):
/// - `q`, `k`, `v`: this position's block, `[batch, heads, block, head_dim]`
/// - `bias.distance` (required): this position's index ROWS, `[batch, block, block * ring
///   size]` (its `column_offset` is ignored: each hop sets the offset of the block it holds),
///   and the table `[buckets, heads]`
/// - `bias.key_padding_mask` (optional): this position's block, `[batch, block]`,
///   `true` = padding; it travels the ring with the block's keys
/// - `bias.dense` (optional): this position's ROWS of a dense bias over every key, `[batch,
///   heads, block, block * ring size]` (the edge encoding's, computed for this block's rows);
///   each hop reads the columns of the key block it holds, and nothing of it travels the ring
/// - returns the output `[batch, heads, block, head_dim]` and log-sum-exp `[batch, heads, block]`
///   over all keys, equal to [`graph_attention`](megagraph_kernels::graph_attention) on the whole
///   sequence restricted to this block's rows; like it, `f16` and `bf16` inputs are computed in
///   `f32`, and the output and the gradients come back in the inputs' dtype, the log-sum-exp in
///   `f32`.
///
/// Every position of `ring` must make the same calls, in the same order, with the same `call`.
/// Differentiable in `q`, `k`, `v`, the table and the dense bias (its gradient, like the bias,
/// is this position's rows over every column); the backward pass communicates over the ring
/// too, and a failure there is reported by [`RingEndpoint::take_failure`] after `backward()`.
///
/// # Errors
///
/// [`ParallelError::Attention`] for inconsistent shapes or a dense bias whose dtype is not
/// `q`'s, [`ParallelError::Unsupported`] without a distance bias, a communication error
/// otherwise.
pub fn ring_attention<B: ContextParallelBackend>(
    inputs: AttendInputs<B>,
    ring: &Arc<RingEndpoint<B::InnerBackend>>,
    call: RingCall,
) -> Result<AttentionOutput<B>, ParallelError> {
    let AttendInputs {
        q,
        k,
        v,
        bias,
        options,
    } = inputs;
    let options = &options;
    let rank = ring.rank;
    let fail = |source: AttentionError| ParallelError::Attention { rank, source };
    let Some(distance) = bias.distance else {
        return Err(ParallelError::Unsupported {
            rank,
            what: "ring attention without a distance bias",
        });
    };
    let [batch, heads, block, head_dim] = q.dims();
    let expect =
        |tensor: &'static str, actual: Vec<usize>, expected: Vec<(&'static str, usize)>| {
            for (&size, (dim, want)) in actual.iter().zip(expected) {
                if size != want {
                    return Err(fail(AttentionError::ShapeMismatch {
                        tensor,
                        dim,
                        expected: want,
                        actual: size,
                        shape: actual.clone(),
                    }));
                }
            }
            Ok(())
        };
    let qkv = vec![
        ("batch", batch),
        ("heads", heads),
        ("block", block),
        ("head_dim", head_dim),
    ];
    expect("k", k.dims().to_vec(), qkv.clone())?;
    expect("v", v.dims().to_vec(), qkv)?;
    expect(
        "distance.index",
        distance.index.dims().to_vec(),
        vec![
            ("batch", batch),
            ("block", block),
            ("total_k_len", block * ring.size),
        ],
    )?;
    let table_dims = distance.table.dims().to_vec();
    expect(
        "distance.table",
        table_dims.clone(),
        vec![("buckets", table_dims[0]), ("heads", heads)],
    )?;
    if let Some(dense) = &bias.dense {
        expect(
            "dense",
            dense.dims().to_vec(),
            vec![
                ("batch", batch),
                ("heads", heads),
                ("block", block),
                ("total_k_len", block * ring.size),
            ],
        )?;
        if dense.dtype() != q.dtype() {
            return Err(fail(AttentionError::DTypeMismatch {
                tensor: "dense",
                expected: q.dtype(),
                actual: dense.dtype(),
            }));
        }
    }
    if let Some(mask) = &bias.key_padding_mask {
        expect(
            "key_padding_mask",
            mask.dims().to_vec(),
            vec![("batch", batch), ("block", block)],
        )?;
    }
    for (tensor, dim, size, shape) in [
        ("q", "batch", batch, q.dims().to_vec()),
        ("q", "heads", heads, q.dims().to_vec()),
        ("q", "block", block, q.dims().to_vec()),
        ("q", "head_dim", head_dim, q.dims().to_vec()),
        (
            "distance.table",
            "buckets",
            table_dims[0],
            table_dims.clone(),
        ),
    ] {
        if size == 0 {
            return Err(fail(AttentionError::EmptyDimension { tensor, dim, shape }));
        }
    }
    if options.block_size == 0 {
        return Err(fail(AttentionError::ZeroBlockSize));
    }
    let scale = options.scale.unwrap_or(1.0 / (head_dim as f32).sqrt());
    if !scale.is_finite() {
        return Err(fail(AttentionError::NonFiniteScale(scale)));
    }
    let dtype = q.dtype();
    let inputs = GraphAttentionInputs::<B> {
        q: primitive(q),
        k: primitive(k),
        v: primitive(v),
        distance: Some(DistanceBiasPrimitive {
            index: distance.index.into_primitive(),
            table: primitive(distance.table),
            column_offset: 0,
        }),
        dense: bias.dense.map(primitive),
        key_padding_mask: bias.key_padding_mask.map(|mask| mask.into_primitive()),
        scale,
        block_size: options.block_size,
    };
    let packed: Tensor<B, 4> = float(B::ring_attention_packed(inputs, ring, call)?);
    let mut result = unpack(packed);
    if result.output.dtype() != dtype {
        // half-precision inputs: computed in f32, output in their dtype (as on one device)
        result.output = result.output.cast(dtype);
    }
    Ok(result)
}

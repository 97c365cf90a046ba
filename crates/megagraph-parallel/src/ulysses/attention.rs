//! [`ulysses_attention`] and [`UlyssesAttention`], the [`Attend`] core of Ulysses.

use std::sync::Arc;

use burn::tensor::{Bool, Tensor, TensorPrimitive};
use megagraph_kernels::{
    AttentionBias, AttentionError, DistanceBias, GraphAttentionBackend, graph_attention,
};
use megagraph_models::{Attend, AttendInputs};

use super::backend::UlyssesBackend;
use super::endpoint::UlyssesEndpoint;
use super::message::{Exchanged, Phase, UlyssesTag};
use crate::{ParallelError, RingCall};

/// Exact biased attention of this position's block over the whole sequence, by Ulysses: the
/// heads are scattered and the sequence gathered, each position attends over every node for
/// `heads / cp` heads, and the output goes back to the blocks' owners.
///
/// - `q`, `k`, `v`: this position's block, `[batch, heads, block, head_dim]` (block `r` of a
///   sequence of `S = block · cp` nodes)
/// - `bias.distance` (required): the index of EVERY row of the sequence, `[batch, S, S]` (its
///   `column_offset` must be 0), and the whole table `[buckets, heads]`; this position reads
///   the table columns of its heads
/// - `bias.key_padding_mask` (optional): the mask of every node, `[batch, S]`, `true` = padding
/// - `bias.dense`: not supported (its all-to-all would communicate it; [`ring_attention`](crate::ring_attention) reads a block's rows of it)
/// - returns the output `[batch, heads, block, head_dim]`, equal to
///   [`graph_attention`] on the whole sequence restricted to this block's rows
///
/// Every position of `group` must make the same calls in the same order with the same `call`.
/// Differentiable in `q`, `k`, `v` and the table (each position's table gradient holds its
/// heads' columns); a failure in the backward exchange is reported by
/// [`UlyssesEndpoint::take_failure`] after `backward()`.
///
/// # Errors
///
/// [`ParallelError::Model`] when `heads` is not a multiple of the group size,
/// [`ParallelError::Attention`] for inconsistent shapes, [`ParallelError::Unsupported`]
/// without a distance bias or with a dense bias, a communication error otherwise.
pub fn ulysses_attention<B: GraphAttentionBackend + UlyssesBackend>(
    inputs: AttendInputs<B>,
    group: &Arc<UlyssesEndpoint<B::InnerBackend>>,
    call: RingCall,
) -> Result<Tensor<B, 4>, ParallelError> {
    let AttendInputs {
        q,
        k,
        v,
        bias,
        options,
    } = inputs;
    let options = &options;
    let rank = group.rank;
    if bias.dense.is_some() {
        return Err(ParallelError::Unsupported {
            rank,
            what: "a dense attention bias in Ulysses attention (its all-to-all would communicate the bias; the ring, cp_mode = ring, slices it by key block)",
        });
    }
    let Some(distance) = bias.distance else {
        return Err(ParallelError::Unsupported {
            rank,
            what: "Ulysses attention without a distance bias",
        });
    };
    let dims = q.dims();
    for (tensor, other) in [("k", k.dims()), ("v", v.dims())] {
        for (dim, (expected, actual)) in ["batch", "heads", "block", "head_dim"]
            .into_iter()
            .zip(dims.into_iter().zip(other))
        {
            if expected != actual {
                let source = AttentionError::ShapeMismatch {
                    tensor,
                    dim,
                    expected,
                    actual,
                    shape: other.to_vec(),
                };
                return Err(ParallelError::Attention { rank, source });
            }
        }
    }
    let heads = dims[1];
    if heads == 0 || !heads.is_multiple_of(group.size) {
        return Err(ParallelError::Model {
            field: "num_heads",
            value: heads,
            reason: "Ulysses needs a positive multiple of cp heads (each position attends for heads / cp of them)",
        });
    }
    let share = heads / group.size;
    let exchange = |x: Tensor<B, 4>,
                    split: usize,
                    concat: usize,
                    tensor: Exchanged|
     -> Result<Tensor<B, 4>, ParallelError> {
        let moved = B::ulysses_all_to_all(
            x.into_primitive().tensor(),
            split,
            concat,
            group,
            call,
            tensor,
        )?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(moved)))
    };
    // heads scattered, sequence gathered: [batch, heads / cp, S, head_dim]
    let q = exchange(q, 1, 2, Exchanged::Queries)?;
    let k = exchange(k, 1, 2, Exchanged::Keys)?;
    let v = exchange(v, 1, 2, Exchanged::Values)?;
    let bias = AttentionBias {
        distance: Some(DistanceBias {
            index: distance.index,
            table: distance.table.narrow(1, group.position * share, share),
            column_offset: distance.column_offset,
        }),
        dense: None,
        key_padding_mask: bias.key_padding_mask,
    };
    let attended = graph_attention(q, k, v, bias, options)
        .map_err(|source| ParallelError::Attention { rank, source })?;
    // back to the blocks' owners, all heads: [batch, heads, block, head_dim]
    exchange(attended.output, 2, 1, Exchanged::Output)
}

/// The key mask of every node of the sequence, `[batch, S]`, gathered from each position's
/// mask of its own block, `[batch, block]` (so key dropout drawn per block applies to every
/// head, as on one device). Not differentiable (a mask).
///
/// # Errors
///
/// A communication failure with a peer.
pub(crate) fn gather_key_mask<B: UlyssesBackend>(
    mask: Tensor<B, 2, Bool>,
    group: &UlyssesEndpoint<B::InnerBackend>,
    call: RingCall,
) -> Result<Tensor<B, 2, Bool>, ParallelError> {
    let part = mask.inner().float().into_primitive().tensor();
    let tag = UlyssesTag {
        call,
        tensor: Exchanged::KeyMask,
        phase: Phase::Forward,
    };
    let received: Vec<Tensor<B::InnerBackend, 2>> = group
        .all_to_all(tag, vec![part; group.size])?
        .into_iter()
        .map(|part| Tensor::from_primitive(TensorPrimitive::Float(part)))
        .collect();
    Ok(Tensor::from_inner(
        Tensor::cat(received, 1).greater_elem(0.5),
    ))
}

/// Ulysses over a context group as the attention core of the model's layers
/// ([`ulysses_attention`]): the layer around it is the model's own. The layer's bias must hold
/// the index of every row of the sequence and the mask of every node.
pub struct UlyssesAttention<'a, B: UlyssesBackend> {
    /// This position's endpoint of the group.
    pub group: &'a Arc<UlyssesEndpoint<B::InnerBackend>>,
    /// Step and micro-batch (the layer is filled in per call).
    pub call: RingCall,
}

impl<B: GraphAttentionBackend + UlyssesBackend> Attend<B> for UlyssesAttention<'_, B> {
    type Error = ParallelError;

    fn attend(&self, inputs: AttendInputs<B>, layer: usize) -> Result<Tensor<B, 4>, ParallelError> {
        ulysses_attention(inputs, self.group, RingCall { layer, ..self.call })
    }
}

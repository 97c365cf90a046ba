//! [`ContextParallelBackend`]: ring attention as a custom autodiff node of every [`Autodiff`]
//! backend whose inner backend runs the graph attention op.

use core::marker::PhantomData;
use std::sync::Arc;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::ops::{Backward, OpsKind};
use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;
use megagraph_kernels::precision::widen;
use megagraph_kernels::{
    DistanceBiasPrimitive, GraphAttentionAutodiffBackend, GraphAttentionBackend,
    GraphAttentionInputs,
};

use super::backward::{RingAttentionBackward, RingState};
use super::endpoint::RingEndpoint;
use super::forward::ring_forward;
use super::message::RingCall;
use crate::ParallelError;
use crate::ulysses::UlyssesBackend;

/// An autodiff backend that runs ring attention with its own backward node (and Ulysses'
/// all-to-all, [`UlyssesBackend`]).
///
/// Implemented for every [`Autodiff`] backend whose inner backend runs the graph attention op;
/// training code bounds on this trait.
pub trait ContextParallelBackend: GraphAttentionAutodiffBackend + UlyssesBackend {
    /// Ring attention at the primitive level. `inputs` are this position's
    /// `q`, `k`, `v` (`[batch, heads, block, head_dim]`), its distance index rows
    /// (`[batch, block, block * ring size]`; the column offset is set per hop) with the table,
    /// its rows of a dense bias, if any (`[batch, heads, block, block * ring size]`; each hop
    /// reads the held block's columns), and its key padding mask (`[batch, block]`). Returns the packed
    /// `[batch, heads, block, head_dim + 1]` result (output, then log-sum-exp), like
    /// [`GraphAttentionBackend::graph_attention_forward`]: in the
    /// [`compute_dtype`](megagraph_kernels::compute_dtype) of the inputs (`f32` for `f16` and
    /// `bf16`), with the gradients in the inputs' dtypes.
    ///
    /// # Errors
    ///
    /// A communication failure with a ring neighbour.
    fn ring_attention_packed(
        inputs: GraphAttentionInputs<Self>,
        ring: &Arc<RingEndpoint<Self::InnerBackend>>,
        call: RingCall,
    ) -> Result<FloatTensor<Self>, ParallelError>;
}

impl<B: GraphAttentionBackend, C: CheckpointStrategy> ContextParallelBackend for Autodiff<B, C> {
    fn ring_attention_packed(
        inputs: GraphAttentionInputs<Self>,
        ring: &Arc<RingEndpoint<B>>,
        call: RingCall,
    ) -> Result<FloatTensor<Self>, ParallelError> {
        let Some(distance) = inputs.distance else {
            return Err(ParallelError::Unsupported {
                rank: ring.rank,
                what: "ring attention without a distance bias",
            });
        };
        // an absent dense bias stands in the parent list as a second reference to `q` (as in
        // the one-device op's node); only a real one receives a gradient
        let dense_node = inputs
            .dense
            .as_ref()
            .map_or_else(|| inputs.q.node_guard(), |dense| dense.node_guard());
        // guards: they keep the inputs referenced until this node is registered (see the
        // one-device op's `graph_attention_forward`), though the table and the dense bias leave
        // `inputs` below
        let nodes = [
            inputs.q.node_guard(),
            inputs.k.node_guard(),
            inputs.v.node_guard(),
            distance.table.node_guard(),
            dense_node,
        ];
        let dtypes = [
            inputs.q.primitive.dtype(),
            inputs.k.primitive.dtype(),
            inputs.v.primitive.dtype(),
            distance.table.primitive.dtype(),
        ];
        let dense_dtype = inputs.dense.as_ref().map(|dense| dense.primitive.dtype());
        // half-precision inputs are computed in f32 (`compute_dtype`), as on one device: q and
        // the table here, k and v per hop (they travel the ring in their own dtype)
        let inner = GraphAttentionInputs::<B> {
            q: widen::<B>(inputs.q.primitive),
            k: inputs.k.primitive,
            v: inputs.v.primitive,
            distance: Some(DistanceBiasPrimitive {
                index: distance.index.cast(),
                table: widen::<B>(distance.table.primitive),
                column_offset: 0,
            }),
            dense: inputs.dense.map(|dense| widen::<B>(dense.primitive)),
            key_padding_mask: inputs.key_padding_mask,
            scale: inputs.scale,
            block_size: inputs.block_size,
        };
        // communicate before registering the node, so an error leaves no half-built graph
        let packed = ring_forward(&inner, ring, call)?;
        let step = RingAttentionBackward::<B> {
            _backend: PhantomData,
        };
        let result = match step.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let state = RingState {
                    inputs: inner,
                    packed: packed.clone(),
                    ring: ring.clone(),
                    call,
                    dtypes,
                    dense_dtype,
                };
                prep.finish(state, packed)
            }
            OpsKind::UnTracked(prep) => prep.finish(packed),
        };
        Ok(result)
    }
}

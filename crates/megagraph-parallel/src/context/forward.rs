//! The forward ring: this position's queries over every block of keys, merged exactly.

use burn::tensor::Tensor;
use burn::tensor::ops::FloatTensor;
use megagraph_kernels::{GraphAttentionBackend, GraphAttentionInputs, merge_partials};

use super::endpoint::RingEndpoint;
use super::hop::{hop_inputs, missing};
use super::message::{Block, Phase, RingCall, RingTag};
use super::packed::{float, pack, primitive, unpack};
use crate::ParallelError;

/// Forward ring on the inner backend: the merged packed result of this position's queries over
/// every block of keys.
pub(super) fn ring_forward<B: GraphAttentionBackend>(
    local: &GraphAttentionInputs<B>,
    ring: &RingEndpoint<B>,
    call: RingCall,
) -> Result<FloatTensor<B>, ParallelError> {
    let mut block = Block {
        owner: ring.position,
        k: Some(local.k.clone()),
        v: Some(local.v.clone()),
        mask: local.key_padding_mask.clone(),
        dk: None,
        dv: None,
    };
    let mut parts = Vec::with_capacity(ring.size);
    for hop in 0..ring.size {
        let tag = RingTag {
            call,
            phase: Phase::Forward,
            hop,
        };
        let last = hop + 1 == ring.size;
        if !last {
            // send first: the neighbour's receive overlaps this hop's compute
            ring.send(tag, block.clone())?;
        }
        let k = block.k.clone().ok_or_else(|| missing(ring.rank, "keys"))?;
        let v = block
            .v
            .clone()
            .ok_or_else(|| missing(ring.rank, "values"))?;
        let packed: Tensor<B, 4> =
            float(B::graph_attention_forward(hop_inputs(local, &block, k, v)));
        parts.push(unpack(packed));
        if !last {
            block = ring.receive(tag)?;
        }
    }
    let merged = merge_partials(parts).map_err(|source| ParallelError::Attention {
        rank: ring.rank,
        source,
    })?;
    Ok(primitive(pack(merged)))
}

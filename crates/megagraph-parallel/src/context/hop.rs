//! One hop of the ring: the op's inputs for the block held, and the error for a block that
//! lacks a part.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use megagraph_kernels::precision::widen;
use megagraph_kernels::{DistanceBiasPrimitive, GraphAttentionInputs};

use super::message::Block;
use super::packed::{float, primitive};
use crate::ParallelError;

/// The inputs of the op for `block`: this position's queries and index rows, the block's keys
/// and values (in their [`compute_dtype`](megagraph_kernels::compute_dtype), as the local
/// queries and table are) and mask, the index columns of the block's owner and, with a dense
/// bias (`[batch, heads, block, block * ring size]`), its columns of the block's owner
/// (`[batch, heads, block, block]`).
pub(super) fn hop_inputs<B: Backend>(
    local: &GraphAttentionInputs<B>,
    block: &Block<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
) -> GraphAttentionInputs<B> {
    let block_len = float::<B, 4>(local.q.clone()).dims()[2];
    let columns = block.owner * block_len..(block.owner + 1) * block_len;
    GraphAttentionInputs {
        q: local.q.clone(),
        k: widen::<B>(k),
        v: widen::<B>(v),
        distance: local.distance.as_ref().map(|d| DistanceBiasPrimitive {
            index: d.index.clone(),
            table: d.table.clone(),
            column_offset: block.owner * block_len,
        }),
        dense: local.dense.as_ref().map(|dense| {
            let dense = float::<B, 4>(dense.clone());
            let [batch, heads, rows, _] = dense.dims();
            primitive(dense.slice([0..batch, 0..heads, 0..rows, columns.clone()]))
        }),
        key_padding_mask: block.mask.clone(),
        scale: local.scale,
        block_size: local.block_size,
    }
}

pub(super) fn missing(rank: usize, what: &str) -> ParallelError {
    ParallelError::OutOfOrder {
        rank,
        expected: format!("a ring block with {what}"),
        got: "a block without it".to_string(),
    }
}

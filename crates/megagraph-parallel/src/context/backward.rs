//! The backward pass of ring attention: the autodiff node and the backward ring.

use core::marker::PhantomData;
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};
use megagraph_kernels::precision::{narrow, widen};
use megagraph_kernels::{GraphAttentionBackend, GraphAttentionInputs};

use super::endpoint::RingEndpoint;
use super::hop::{hop_inputs, missing};
use super::message::{Block, Phase, RingCall, RingTag};
use super::packed::{float, primitive};
use crate::ParallelError;

/// Backward step of ring attention. Parents: `[q, k, v, table, dense]` (without a dense bias,
/// its place holds `q` again and gets no gradient).
#[derive(Debug)]
pub(super) struct RingAttentionBackward<B> {
    pub(super) _backend: PhantomData<B>,
}

/// What the backward step keeps: this position's inner inputs, the merged packed result, the
/// ring and the call it belongs to.
#[derive(Clone, Debug)]
pub(super) struct RingState<B: Backend> {
    pub(super) inputs: GraphAttentionInputs<B>,
    pub(super) packed: FloatTensor<B>,
    pub(super) ring: Arc<RingEndpoint<B>>,
    pub(super) call: RingCall,
    /// The dtypes of q, k, v and the table as the caller gave them: their gradients, summed in
    /// the compute dtype over the hops, are cast back to these.
    pub(super) dtypes: [DType; 4],
    /// The dtype of the dense bias as the caller gave it, `None` without one.
    pub(super) dense_dtype: Option<DType>,
}

impl<B: GraphAttentionBackend> Backward<B, 5> for RingAttentionBackward<B> {
    type State = RingState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 5>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let [node_q, node_k, node_v, node_table, node_dense] = ops.parents;
        let packed_grad = grads.consume::<B>(&ops.node);
        let RingState {
            inputs,
            packed,
            ring,
            call,
            dtypes,
            dense_dtype,
        } = ops.state;
        let zeros = zero_grads(&inputs);
        let result = match ring_backward(inputs, packed, packed_grad, &ring, call) {
            Ok(result) => result,
            Err(error) => {
                ring.record_failure(error);
                zeros
            }
        };
        let parents = [
            (node_q, result.q),
            (node_k, result.k),
            (node_v, result.v),
            (node_table, result.table),
        ];
        for ((node, grad), dtype) in parents.into_iter().zip(dtypes) {
            if let Some(node) = node {
                grads.register::<B>(node.id, narrow::<B>(grad, dtype));
            }
        }
        if let (Some(node), Some(grad), Some(dtype)) = (node_dense, result.dense, dense_dtype) {
            grads.register::<B>(node.id, narrow::<B>(grad, dtype));
        }
    }
}

/// Gradients of one position's inputs.
struct RingGrads<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    table: FloatTensor<B>,
    /// This position's rows over every column, `[batch, heads, block, block * ring size]`;
    /// `None` without a dense bias.
    dense: Option<FloatTensor<B>>,
}

/// Zero gradients of `inputs` in their compute dtype (the hops' sums run in it).
fn zero_grads<B: Backend>(inputs: &GraphAttentionInputs<B>) -> RingGrads<B> {
    let zeros4 = |t: &FloatTensor<B>| widen::<B>(primitive(float::<B, 4>(t.clone()).zeros_like()));
    let table = inputs.distance.as_ref().map_or_else(
        || primitive(Tensor::<B, 2>::zeros([1, 1], &B::float_device(&inputs.q))),
        |d| primitive(float::<B, 2>(d.table.clone()).zeros_like()),
    );
    RingGrads {
        q: zeros4(&inputs.q),
        k: zeros4(&inputs.k),
        v: zeros4(&inputs.v),
        table,
        dense: inputs.dense.as_ref().map(|d| widen::<B>(primitive(float::<B, 4>(d.clone()).zeros_like()))),
    }
}

fn add<B: Backend, const D: usize>(acc: Tensor<B, D>, grad: FloatTensor<B>) -> Tensor<B, D> {
    acc + float::<B, D>(grad)
}

/// Backward ring on the inner backend: every block's contribution is recomputed from the merged
/// result; K/V gradients travel with their block and come home after one more hop.
fn ring_backward<B: GraphAttentionBackend>(
    local: GraphAttentionInputs<B>,
    packed_output: FloatTensor<B>,
    packed_grad: FloatTensor<B>,
    ring: &RingEndpoint<B>,
    call: RingCall,
) -> Result<RingGrads<B>, ParallelError> {
    let zeros = zero_grads(&local);
    let mut d_q: Tensor<B, 4> = float(zeros.q);
    let mut d_table: Tensor<B, 2> = float(zeros.table);
    // the dense bias's gradient, one column block per key block: the block of owner `o` is
    // columns `o * block .. (o + 1) * block` of this position's rows
    let mut d_dense: Vec<Option<Tensor<B, 4>>> = vec![None; ring.size];
    let mut block = Block {
        owner: ring.position,
        k: Some(local.k.clone()),
        v: Some(local.v.clone()),
        mask: local.key_padding_mask.clone(),
        dk: Some(zeros.k),
        dv: Some(zeros.v),
    };
    for hop in 0..ring.size {
        let k = block.k.take().ok_or_else(|| missing(ring.rank, "keys"))?;
        let v = block.v.take().ok_or_else(|| missing(ring.rank, "values"))?;
        let inputs = hop_inputs(&local, &block, k.clone(), v.clone());
        let grads = B::graph_attention_backward(inputs, packed_output.clone(), packed_grad.clone());
        d_q = add(d_q, grads.q);
        if let Some(table) = grads.table {
            d_table = add(d_table, table);
        }
        if let Some(dense) = grads.dense {
            d_dense[block.owner] = Some(float(dense));
        }
        let dk = block
            .dk
            .take()
            .ok_or_else(|| missing(ring.rank, "key gradients"))?;
        let dv = block
            .dv
            .take()
            .ok_or_else(|| missing(ring.rank, "value gradients"))?;
        let dk = primitive(add::<B, 4>(float(dk), grads.k));
        let dv = primitive(add::<B, 4>(float(dv), grads.v));
        if ring.size == 1 {
            block.dk = Some(dk);
            block.dv = Some(dv);
            break;
        }
        let tag = RingTag {
            call,
            phase: Phase::Backward,
            hop,
        };
        let last = hop + 1 == ring.size;
        // on the last hop only the gradients travel: the next position owns this block
        let outgoing = Block {
            owner: block.owner,
            k: (!last).then_some(k),
            v: (!last).then_some(v),
            mask: if last { None } else { block.mask.take() },
            dk: Some(dk),
            dv: Some(dv),
        };
        ring.send(tag, outgoing)?;
        block = ring.receive(tag)?;
    }
    if block.owner != ring.position {
        return Err(ParallelError::OutOfOrder {
            rank: ring.rank,
            expected: format!("the gradients of ring block {}", ring.position),
            got: format!("those of block {}", block.owner),
        });
    }
    let dense = match local.dense {
        None => None,
        Some(_) => {
            let parts = d_dense
                .into_iter()
                .enumerate()
                .map(|(owner, part)| {
                    part.ok_or_else(|| ParallelError::OutOfOrder {
                        rank: ring.rank,
                        expected: format!("the dense bias gradient of key block {owner}"),
                        got: "no hop over that block".to_string(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(primitive(Tensor::cat(parts, 3)))
        }
    };
    Ok(RingGrads {
        dense,
        q: primitive(d_q),
        k: block
            .dk
            .ok_or_else(|| missing(ring.rank, "key gradients"))?,
        v: block
            .dv
            .ok_or_else(|| missing(ring.rank, "value gradients"))?,
        table: primitive(d_table),
    })
}

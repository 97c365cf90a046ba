//! The ops on [`Autodiff`]: one custom backward node per op. Biased attention's saves the inputs
//! and the packed output and recomputes probabilities tile by tile in the backward pass; sparse
//! edge attention's saves the inputs, the output and the per-(query, head) normalizer and
//! recomputes the per-edge weights.

use core::marker::PhantomData;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use crate::backend::GraphAttentionBackend;
use crate::primitives::{DistanceBiasPrimitive, GraphAttentionInputs, SparseEdgeInputs, SparseEdgeOutput};

/// Backward step of sparse edge attention. Parents: `[q, k, v]`.
#[derive(Debug)]
struct SparseEdgeBackward<B> {
    _backend: PhantomData<B>,
}

impl<B: GraphAttentionBackend> Backward<B, 3> for SparseEdgeBackward<B> {
    /// The inner-backend inputs and the forward pass's output and normalizer.
    type State = (SparseEdgeInputs<B>, SparseEdgeOutput<B>);

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let (inputs, output) = ops.state;
        let result = B::sparse_edge_attention_backward(inputs, output, grad);
        for (parent, grad) in ops.parents.into_iter().zip([result.q, result.k, result.v]) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// Backward step of the op. Parents: `[q, k, v, table, dense]`.
#[derive(Debug)]
struct GraphAttentionBackward<B> {
    _backend: PhantomData<B>,
}

/// What the backward step keeps: the inner-backend inputs (q, k, v, index, table, dense bias,
/// mask: references to tensors the caller holds anyway) and the packed `[out | lse]` result.
type SavedState<B> = (GraphAttentionInputs<B>, FloatTensor<B>);

impl<B: GraphAttentionBackend> Backward<B, 5> for GraphAttentionBackward<B> {
    type State = SavedState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 5>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let [node_q, node_k, node_v, node_table, node_dense] = ops.parents;
        let packed_grad = grads.consume::<B>(&ops.node);
        let (inputs, packed_output) = ops.state;
        let has_distance = inputs.distance.is_some();
        let has_dense = inputs.dense.is_some();
        let result = B::graph_attention_backward(inputs, packed_output, packed_grad);
        if let Some(node) = node_q {
            grads.register::<B>(node.id, result.q);
        }
        if let Some(node) = node_k {
            grads.register::<B>(node.id, result.k);
        }
        if let Some(node) = node_v {
            grads.register::<B>(node.id, result.v);
        }
        // An absent table or dense bias stands in the parent list as a second reference to `q`
        // (see `graph_attention_forward`); only real inputs receive gradients.
        if let (true, Some(node), Some(grad)) = (has_distance, node_table, result.table) {
            grads.register::<B>(node.id, grad);
        }
        if let (true, Some(node), Some(grad)) = (has_dense, node_dense, result.dense) {
            grads.register::<B>(node.id, grad);
        }
    }
}

impl<B: GraphAttentionBackend, C: CheckpointStrategy> GraphAttentionBackend for Autodiff<B, C> {
    fn sparse_edge_attention_forward(inputs: SparseEdgeInputs<Self>) -> SparseEdgeOutput<Self> {
        let nodes = [inputs.q.node_guard(), inputs.k.node_guard(), inputs.v.node_guard()];
        let inner = SparseEdgeInputs::<B> {
            q: inputs.q.primitive,
            k: inputs.k.primitive,
            v: inputs.v.primitive,
            src: inputs.src,
            dst: inputs.dst,
            host: inputs.host,
            scale: inputs.scale,
        };
        let step = SparseEdgeBackward::<B> {
            _backend: PhantomData,
        };
        let (out, normalizer) = match step.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let output = B::sparse_edge_attention_forward(inner.clone());
                let normalizer = output.normalizer.clone();
                let out = output.out.clone();
                (prep.finish((inner, output), out), normalizer)
            }
            OpsKind::UnTracked(prep) => {
                let output = B::sparse_edge_attention_forward(inner);
                (prep.finish(output.out), output.normalizer)
            }
        };
        // the normalizer is no output to differentiate: a constant of the graph
        SparseEdgeOutput {
            out,
            normalizer: <Self as AutodiffBackend>::from_inner(normalizer),
        }
    }

    fn graph_attention_forward(inputs: GraphAttentionInputs<Self>) -> FloatTensor<Self> {
        // The inputs' guards keep them referenced until this op's node is registered (the
        // vendored burn-autodiff's `prepare` holds them): the clean-up that ends every thread's
        // `backward()` frees nodes that no tensor references, and a parent freed before its child
        // is registered never gets its gradient. The table and the dense bias leave `inputs`
        // below; when they were dropped there, a Ulysses position's slice of the table (made
        // just for this call) lost one layer's table gradient in about one run in a hundred on a
        // cp = dp = 2 mesh.
        let q_node = inputs.q.node_guard();
        let table_node = inputs
            .distance
            .as_ref()
            .map_or_else(|| q_node.clone(), |d| d.table.node_guard());
        let dense_node = inputs
            .dense
            .as_ref()
            .map_or_else(|| q_node.clone(), |d| d.node_guard());
        let nodes = [
            q_node,
            inputs.k.node_guard(),
            inputs.v.node_guard(),
            table_node,
            dense_node,
        ];
        let inner = GraphAttentionInputs::<B> {
            q: inputs.q.primitive,
            k: inputs.k.primitive,
            v: inputs.v.primitive,
            distance: inputs.distance.map(|d| DistanceBiasPrimitive {
                index: d.index.cast(),
                table: d.table.primitive,
                column_offset: d.column_offset,
            }),
            dense: inputs.dense.map(|d| d.primitive),
            key_padding_mask: inputs.key_padding_mask,
            scale: inputs.scale,
            block_size: inputs.block_size,
        };
        let step = GraphAttentionBackward::<B> {
            _backend: PhantomData,
        };
        let packed = match step.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let packed = B::graph_attention_forward(inner.clone());
                prep.finish((inner, packed.clone()), packed)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::graph_attention_forward(inner)),
        };
        packed
    }
}

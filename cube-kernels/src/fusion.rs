//! The op on [`Fusion`] (Burn's public `Wgpu` / `Cuda` types with its default `fusion` feature):
//! forward and backward are each registered as one custom operation of the fusion stream, whose
//! execution takes the inner backend's tensors and runs the inner backend's op (the CubeCL
//! kernels for `Fusion<CubeBackend>`), the pattern of burn-vision's `Fusion` ops.
//!
//! The fusion runtime does not fuse across a custom operation: the ops before it are flushed,
//! those after it start a new fused run.

use core::marker::PhantomData;

use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::backend::GraphAttentionBackend;
use crate::primitives::{DistanceBiasPrimitive, GraphAttentionGrads, GraphAttentionInputs};
use crate::index::{BucketIndexPrimitive, SparseBucketIndexPrimitive};

/// The fusion runtime of the inner backend `B`.
type Runtime<B> = <B as FusionBackend>::FusionRuntime;

/// The handles an operation of the inner backend `B` executes on.
type Handles<B> = HandleContainer<<Runtime<B> as FusionRuntime>::FusionHandle>;

impl<B> GraphAttentionBackend for Fusion<B>
where
    B: FusionBackend + GraphAttentionBackend,
{
    fn graph_attention_forward(inputs: GraphAttentionInputs<Self>) -> FloatTensor<Self> {
        let q = &inputs.q;
        let [batch, heads, q_len, head_dim] = q.shape.dims::<4>();
        let (client, dtype) = (q.client.clone(), q.dtype);
        let packed = TensorIr::uninit(
            client.create_empty_handle(),
            Shape::from(vec![batch, heads, q_len, head_dim + 1]),
            dtype,
        );
        let (tensors, layout) = Layout::flatten(inputs);
        let streams = OperationStreams::with_inputs(&tensors);
        let ir: Vec<TensorIr> = tensors.into_iter().map(FusionTensor::into_ir).collect();
        let desc = CustomOpIr::new("graph_attention_forward", &ir, &[packed]);
        let op = ForwardOp::<B> {
            desc: desc.clone(),
            layout,
            _backend: PhantomData,
        };
        let mut outputs = client.register(streams, OperationIr::Custom(desc), op);
        outputs
            .pop()
            .unwrap_or_else(|| unreachable!("one output registered"))
    }

    fn graph_attention_backward(
        inputs: GraphAttentionInputs<Self>,
        packed_output: FloatTensor<Self>,
        packed_grad: FloatTensor<Self>,
    ) -> GraphAttentionGrads<Self> {
        let client = inputs.q.client.clone();
        // A gradient has its input's shape and dtype.
        let grad_of = |t: &FusionTensor<Runtime<B>>| {
            TensorIr::uninit(client.create_empty_handle(), t.shape.clone(), t.dtype)
        };
        let mut grads = vec![grad_of(&inputs.q), grad_of(&inputs.k), grad_of(&inputs.v)];
        let has_table = inputs.distance.is_some();
        if let Some(distance) = &inputs.distance {
            grads.push(grad_of(&distance.table));
        }
        let has_dense = inputs.dense.is_some();
        if let Some(dense) = &inputs.dense {
            grads.push(grad_of(dense));
        }
        let (mut tensors, layout) = Layout::flatten(inputs);
        tensors.extend([packed_output, packed_grad]);
        let streams = OperationStreams::with_inputs(&tensors);
        let ir: Vec<TensorIr> = tensors.into_iter().map(FusionTensor::into_ir).collect();
        let desc = CustomOpIr::new("graph_attention_backward", &ir, &grads);
        let op = BackwardOp::<B> {
            desc: desc.clone(),
            layout,
            _backend: PhantomData,
        };
        let mut outputs = client
            .register(streams, OperationIr::Custom(desc), op)
            .into_iter();
        let mut next = || {
            outputs
                .next()
                .unwrap_or_else(|| unreachable!("one output per gradient"))
        };
        GraphAttentionGrads {
            q: next(),
            k: next(),
            v: next(),
            table: has_table.then(&mut next),
            dense: has_dense.then(&mut next),
        }
    }
}

/// What the IR's input list of the op holds besides its tensors, and in which order.
///
/// The tensors are flattened as `q, k, v`, then with a distance bias `table` and the index
/// (`index` when dense; `row_offsets, columns, buckets` when sparse), then `dense` and
/// `key_padding_mask` when present; the backward pass appends `packed_output, packed_grad`.
#[derive(Clone, Debug)]
struct Layout {
    distance: Option<DistanceLayout>,
    has_dense: bool,
    has_mask: bool,
    scale: f32,
    block_size: usize,
}

/// The non-tensor part of a distance bias.
#[derive(Clone, Copy, Debug)]
struct DistanceLayout {
    column_offset: usize,
    /// `Some((total_k_len, far_bucket))` for a sparse index, `None` for a dense one.
    sparse: Option<(usize, usize)>,
}

impl Layout {
    /// The tensors of `inputs` in the IR's order, and the rest.
    fn flatten<R: FusionRuntime, B: FusionBackend<FusionRuntime = R>>(
        inputs: GraphAttentionInputs<Fusion<B>>,
    ) -> (Vec<FusionTensor<R>>, Self) {
        let mut tensors = vec![inputs.q, inputs.k, inputs.v];
        let distance = inputs.distance.map(|d| {
            tensors.push(d.table);
            let sparse = match d.index {
                BucketIndexPrimitive::Dense(index) => {
                    tensors.push(index);
                    None
                }
                BucketIndexPrimitive::Sparse(s) => {
                    tensors.extend([s.row_offsets, s.columns, s.buckets]);
                    Some((s.total_k_len, s.far_bucket))
                }
            };
            DistanceLayout {
                column_offset: d.column_offset,
                sparse,
            }
        });
        let has_dense = inputs.dense.is_some();
        tensors.extend(inputs.dense);
        let has_mask = inputs.key_padding_mask.is_some();
        tensors.extend(inputs.key_padding_mask);
        let layout = Self {
            distance,
            has_dense,
            has_mask,
            scale: inputs.scale,
            block_size: inputs.block_size,
        };
        (tensors, layout)
    }

    /// The inner backend's inputs, taking the tensors from the front of `ir` in the order of
    /// [`Self::flatten`].
    fn inputs<'a, B: FusionBackend>(
        &self,
        ir: &mut impl Iterator<Item = &'a TensorIr>,
        handles: &mut Handles<B>,
    ) -> GraphAttentionInputs<B> {
        let mut next = || {
            ir.next()
                .unwrap_or_else(|| unreachable!("the IR lists every input"))
        };
        let q = handles.get_float_tensor::<B>(next());
        let k = handles.get_float_tensor::<B>(next());
        let v = handles.get_float_tensor::<B>(next());
        let distance = self.distance.map(|d| {
            let table = handles.get_float_tensor::<B>(next());
            let index = match d.sparse {
                None => BucketIndexPrimitive::Dense(handles.get_int_tensor::<B>(next())),
                Some((total_k_len, far_bucket)) => {
                    BucketIndexPrimitive::Sparse(SparseBucketIndexPrimitive {
                        row_offsets: handles.get_int_tensor::<B>(next()),
                        columns: handles.get_int_tensor::<B>(next()),
                        buckets: handles.get_int_tensor::<B>(next()),
                        total_k_len,
                        far_bucket,
                    })
                }
            };
            DistanceBiasPrimitive {
                index,
                table,
                column_offset: d.column_offset,
            }
        });
        let dense = self
            .has_dense
            .then(|| handles.get_float_tensor::<B>(next()));
        let key_padding_mask = self.has_mask.then(|| handles.get_bool_tensor::<B>(next()));
        GraphAttentionInputs {
            q,
            k,
            v,
            distance,
            dense,
            key_padding_mask,
            scale: self.scale,
            block_size: self.block_size,
        }
    }
}

/// The forward pass as a custom operation: inputs in [`Layout`] order, one output (the packed
/// `[out | lse]`).
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    layout: Layout,
    _backend: PhantomData<B>,
}

impl<B> Operation<Runtime<B>> for ForwardOp<B>
where
    B: FusionBackend + GraphAttentionBackend,
{
    fn execute(&self, handles: &mut Handles<B>) {
        let inputs = self
            .layout
            .inputs::<B>(&mut self.desc.inputs.iter(), handles);
        let packed = B::graph_attention_forward(inputs);
        handles.register_float_tensor::<B>(&self.desc.outputs[0].id, packed);
    }
}

/// The backward pass as a custom operation: inputs in [`Layout`] order then `packed_output,
/// packed_grad`; outputs the gradients of `q, k, v`, then of the table and of the dense bias
/// when present.
#[derive(Debug)]
struct BackwardOp<B> {
    desc: CustomOpIr,
    layout: Layout,
    _backend: PhantomData<B>,
}

impl<B> Operation<Runtime<B>> for BackwardOp<B>
where
    B: FusionBackend + GraphAttentionBackend,
{
    fn execute(&self, handles: &mut Handles<B>) {
        let mut ir = self.desc.inputs.iter();
        let inputs = self.layout.inputs::<B>(&mut ir, handles);
        let mut next = || {
            ir.next()
                .unwrap_or_else(|| unreachable!("the IR lists the packed tensors"))
        };
        let packed_output = handles.get_float_tensor::<B>(next());
        let packed_grad = handles.get_float_tensor::<B>(next());
        let grads = B::graph_attention_backward(inputs, packed_output, packed_grad);
        let mut ids = self.desc.outputs.iter().map(|t| t.id);
        let mut register = |grad: FloatTensor<B>| {
            let id = ids
                .next()
                .unwrap_or_else(|| unreachable!("the IR lists every gradient"));
            handles.register_float_tensor::<B>(&id, grad);
        };
        register(grads.q);
        register(grads.k);
        register(grads.v);
        if self.layout.distance.is_some() {
            register(
                grads
                    .table
                    .unwrap_or_else(|| unreachable!("a distance bias has a table gradient")),
            );
        }
        if self.layout.has_dense {
            register(
                grads
                    .dense
                    .unwrap_or_else(|| unreachable!("a dense bias has a gradient")),
            );
        }
    }
}

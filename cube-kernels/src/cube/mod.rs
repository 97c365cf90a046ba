//! The op on [`CubeBackend`] (wgpu, CUDA, …): forward and backward as CubeCL kernels
//! (features `wgpu` / `cuda`).
//!
//! Same semantics and numerics as the reference implementation (online softmax forward,
//! recomputation backward from the saved log-sum-exp), without any `[q_len, k_len]` buffer
//! except the dense-bias gradient when a dense bias is given. The table gradient goes through a
//! `[batch, heads, q_len, buckets]` buffer of per-row bucket sums (no float atomics, which WGSL
//! lacks), reduced with tensor ops.

mod kernels;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorPrimitive};
use burn_cubecl::cubecl::{CubeDim, calculate_cube_count_elemwise};
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use crate::DistanceBias;
use crate::backend::{GraphAttentionBackend, GraphAttentionGrads, GraphAttentionInputs};
use crate::index::{BucketIndexPrimitive, HostCsr};

/// Fused backends (`burn::backend::Wgpu` / `Cuda` with Burn's `fusion` feature) run the reference
/// implementation, whose tensor ops the fusion runtime compiles; the hand-written kernels need the
/// plain [`CubeBackend`].
impl<B: burn_fusion::FusionBackend> GraphAttentionBackend for burn_fusion::Fusion<B> {}

impl<R, F, I, BT> GraphAttentionBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn graph_attention_forward(inputs: GraphAttentionInputs<Self>) -> FloatTensor<Self> {
        let launch = Launch::<R, F, I, BT>::new(inputs);
        launch.forward()
    }

    fn graph_attention_backward(
        inputs: GraphAttentionInputs<Self>,
        packed_output: FloatTensor<Self>,
        packed_grad: FloatTensor<Self>,
    ) -> GraphAttentionGrads<Self> {
        let launch = Launch::<R, F, I, BT>::new(inputs);
        launch.backward(packed_output, packed_grad)
    }
}

/// Kernel arguments common to the three kernels, with placeholders for absent inputs.
struct Launch<R: CubeRuntime, F, I, BT> {
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    index: CubeTensor<R>,
    table: CubeTensor<R>,
    dense: CubeTensor<R>,
    mask: CubeTensor<R>,
    column_offset: usize,
    scale: f32,
    buckets: usize,
    has_distance: bool,
    has_dense: bool,
    has_mask: bool,
    _elements: core::marker::PhantomData<(F, I, BT)>,
}

impl<R, F, I, BT> Launch<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn new(inputs: GraphAttentionInputs<CubeBackend<R, F, I, BT>>) -> Self {
        let q = inputs.q;
        let float_dtype = float_dtype(q.dtype);
        let placeholder = |rank: usize, dtype: DType| {
            zeros_client(
                q.client.clone(),
                q.device.clone(),
                Shape::from(vec![1; rank]),
                dtype,
            )
        };
        let has_distance = inputs.distance.is_some();
        let (index, table, column_offset, buckets) = match inputs.distance {
            Some(d) => {
                let buckets = d.table.meta.shape()[0];
                match d.index {
                    BucketIndexPrimitive::Dense(index) => {
                        (index, d.table, d.column_offset, buckets)
                    }
                    // The kernels read a dense index: expand the key block's columns (a
                    // transient `[batch, q_len, k_len]` of bytes).
                    BucketIndexPrimitive::Sparse(sparse) => {
                        let [batch, _, _, _] = q.meta.shape().dims::<4>();
                        let k_len = inputs.k.meta.shape()[2];
                        let csr = HostCsr::read::<CubeBackend<R, F, I, BT>>(&sparse);
                        let columns = d.column_offset..d.column_offset + k_len;
                        let q_len = q.meta.shape()[2];
                        let dense = csr.densify(batch, columns);
                        let index = DistanceBias::<CubeBackend<R, F, I, BT>>::index_from_u8(
                            dense,
                            [batch, q_len, k_len],
                            &q.device,
                        )
                        .unwrap_or_else(|err| unreachable!("sized above: {err}"))
                        .into_primitive();
                        (index, d.table, 0, buckets)
                    }
                }
            }
            None => (placeholder(3, DType::I32), placeholder(2, q.dtype), 0, 0),
        };
        let has_dense = inputs.dense.is_some();
        let dense = inputs.dense.unwrap_or_else(|| placeholder(4, q.dtype));
        let has_mask = inputs.key_padding_mask.is_some();
        let mask = match inputs.key_padding_mask {
            Some(mask) => {
                <CubeBackend<R, F, I, BT> as burn::tensor::ops::BoolTensorOps<_>>::bool_into_float(
                    mask,
                    float_dtype,
                )
            }
            None => placeholder(2, q.dtype),
        };
        Self {
            q,
            k: inputs.k,
            v: inputs.v,
            index,
            table,
            dense,
            mask,
            column_offset,
            scale: inputs.scale,
            buckets,
            has_distance,
            has_dense,
            has_mask,
            _elements: core::marker::PhantomData,
        }
    }

    /// `[batch, heads, q_len, head_dim]` and `k_len`.
    fn dims(&self) -> ([usize; 4], usize) {
        let s = self.q.meta.shape();
        ([s[0], s[1], s[2], s[3]], self.k.meta.shape()[2])
    }

    fn empty(&self, shape: Vec<usize>) -> CubeTensor<R> {
        empty_device_dtype(
            self.q.client.clone(),
            self.q.device.clone(),
            Shape::from(shape),
            self.q.dtype,
        )
    }

    fn zeros(&self, shape: Vec<usize>) -> CubeTensor<R> {
        zeros_client(
            self.q.client.clone(),
            self.q.device.clone(),
            Shape::from(shape),
            self.q.dtype,
        )
    }

    fn forward(self) -> CubeTensor<R> {
        let ([batch, heads, q_len, head_dim], _) = self.dims();
        let packed = self.empty(vec![batch, heads, q_len, head_dim + 1]);
        let client = self.q.client.clone();
        let rows = batch * heads * q_len;
        let cube_dim = CubeDim::new(&client, rows);
        let cube_count = calculate_cube_count_elemwise(&client, rows, cube_dim);
        let dtypes = [self.q.dtype.into(), self.index.dtype.into()];
        kernels::forward_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            self.q.into_tensor_arg(),
            self.k.into_tensor_arg(),
            self.v.into_tensor_arg(),
            self.index.into_tensor_arg(),
            self.table.into_tensor_arg(),
            self.dense.into_tensor_arg(),
            self.mask.into_tensor_arg(),
            packed.clone().into_tensor_arg(),
            self.scale,
            f32::NEG_INFINITY,
            self.column_offset,
            head_dim,
            self.has_distance,
            self.has_dense,
            self.has_mask,
            dtypes,
        );
        packed
    }

    fn backward(
        self,
        packed_output: CubeTensor<R>,
        packed_grad: CubeTensor<R>,
    ) -> GraphAttentionGrads<CubeBackend<R, F, I, BT>> {
        let ([batch, heads, q_len, head_dim], k_len) = self.dims();
        let client = self.q.client.clone();
        let dtypes = [self.q.dtype.into(), self.index.dtype.into()];
        let d_q = self.empty(vec![batch, heads, q_len, head_dim]);
        let shift = self.empty(vec![batch, heads, q_len]);
        let d_dense = if self.has_dense {
            self.empty(vec![batch, heads, q_len, k_len])
        } else {
            self.zeros(vec![1, 1, 1, 1])
        };
        let bucket_grad = if self.has_distance {
            self.zeros(vec![batch, heads, q_len, self.buckets])
        } else {
            self.zeros(vec![1, 1, 1, 1])
        };
        let rows = batch * heads * q_len;
        let cube_dim = CubeDim::new(&client, rows);
        let cube_count = calculate_cube_count_elemwise(&client, rows, cube_dim);
        kernels::query_backward_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            self.q.clone().into_tensor_arg(),
            self.k.clone().into_tensor_arg(),
            self.v.clone().into_tensor_arg(),
            self.index.clone().into_tensor_arg(),
            self.table.clone().into_tensor_arg(),
            self.dense.clone().into_tensor_arg(),
            self.mask.clone().into_tensor_arg(),
            packed_output.clone().into_tensor_arg(),
            packed_grad.clone().into_tensor_arg(),
            d_q.clone().into_tensor_arg(),
            shift.clone().into_tensor_arg(),
            d_dense.clone().into_tensor_arg(),
            bucket_grad.clone().into_tensor_arg(),
            self.scale,
            self.column_offset,
            head_dim,
            self.has_distance,
            self.has_dense,
            self.has_mask,
            dtypes,
        );

        let d_k = self.empty(vec![batch, heads, k_len, head_dim]);
        let d_v = self.empty(vec![batch, heads, k_len, head_dim]);
        let keys = batch * heads * k_len;
        let cube_dim = CubeDim::new(&client, keys);
        let cube_count = calculate_cube_count_elemwise(&client, keys, cube_dim);
        kernels::key_backward_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            self.q.into_tensor_arg(),
            self.k.into_tensor_arg(),
            self.v.into_tensor_arg(),
            self.index.into_tensor_arg(),
            self.table.into_tensor_arg(),
            self.dense.into_tensor_arg(),
            self.mask.into_tensor_arg(),
            packed_output.into_tensor_arg(),
            packed_grad.into_tensor_arg(),
            shift.into_tensor_arg(),
            d_k.clone().into_tensor_arg(),
            d_v.clone().into_tensor_arg(),
            self.scale,
            self.column_offset,
            head_dim,
            self.has_distance,
            self.has_dense,
            self.has_mask,
            dtypes,
        );

        let table = self.has_distance.then(|| {
            let per_row = Tensor::<CubeBackend<R, F, I, BT>, 4>::from_primitive(
                TensorPrimitive::Float(bucket_grad),
            );
            per_row
                .sum_dim(0)
                .sum_dim(2)
                .reshape([heads, self.buckets])
                .transpose()
                .into_primitive()
                .tensor()
        });
        GraphAttentionGrads {
            q: d_q,
            k: d_k,
            v: d_v,
            table,
            dense: self.has_dense.then_some(d_dense),
        }
    }
}

/// The float dtype of a float tensor's dtype (`f32` for anything unexpected).
fn float_dtype(dtype: DType) -> FloatDType {
    match dtype {
        DType::F64 => FloatDType::F64,
        DType::F16 => FloatDType::F16,
        DType::BF16 => FloatDType::BF16,
        _ => FloatDType::F32,
    }
}

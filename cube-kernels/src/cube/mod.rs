//! The op on [`CubeBackend`] (wgpu, CUDA, …): forward and backward as CubeCL kernels
//! (features `wgpu` / `cuda`).
//!
//! Same semantics and numerics as the reference implementation (online softmax forward,
//! recomputation backward from the saved log-sum-exp), without any `[q_len, k_len]` buffer
//! except the dense-bias gradient when a dense bias is given. The kernels, one concept per file:
//! [`tiles`] (their common arguments and shared-memory helpers), [`forward`], [`split_k`] (the
//! forward pass over key chunks when there are few query rows), [`backward_queries`] (the row
//! shift `D` and `dQ`), [`backward_keys`] (`dK`, `dV` and the table gradient as per-cube
//! partial sums, no float atomics, which WGSL lacks, reduced with tensor ops) and [`densify`]
//! (a sparse index's key block expanded on the device). This module builds their arguments and
//! launches them.

mod backward_keys;
mod backward_queries;
mod densify;
mod forward;
pub(crate) mod split_k;
mod tiles;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, FloatDType, Shape, Tensor, TensorPrimitive};
use burn_cubecl::cubecl::prelude::{AddressType, CubeCount, CubeDim, Float, Numeric};
use burn_cubecl::ops::numeric::{empty_device_dtype, zeros_client};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use crate::backend::GraphAttentionBackend;
use crate::primitives::{GraphAttentionGrads, GraphAttentionInputs};
use crate::index::BucketIndexPrimitive;
use tiles::Tiling;

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
    block_size: usize,
    _elements: core::marker::PhantomData<(F, I, BT)>,
}

/// Launches one of the tiled kernels (every kernel but `shift_kernel`) over tiles of `rows`
/// rows, one cube per (tile, head, `layers` along `z`: the batch, times the key splits of the
/// forward pass): the common [`Inputs`](tiles::Inputs), then the kernel's own `tensors` and
/// `scalars`, the [`Tiling`] and the dtypes, the order all of them declare.
macro_rules! launch_tiled {
    ($launch:ident, $module:ident::$kernel:ident, rows: $rows:expr, layers: $layers:expr,
     tensors: [$($tensor:expr),* $(,)?], scalars: [$($scalar:expr),* $(,)?] $(,)?) => {{
        let tiling = $launch.tiling();
        let (cube_count, cube_dim) = $launch.grid($rows, $layers);
        $module::$kernel::launch(
            &$launch.q.client,
            cube_count,
            cube_dim,
            $launch.address_type(&[$(&$tensor),*]),
            $launch.inputs(),
            $($tensor.clone().into_tensor_arg(),)*
            $($scalar,)*
            tiling,
            [$launch.q.dtype.into(), $launch.index.dtype.into()],
        )
    }};
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
                    // The kernels read a dense index: expand the key block's columns on the
                    // device (a transient `[batch, q_len, k_len]` of buckets).
                    BucketIndexPrimitive::Sparse(sparse) => {
                        let [batch, _, q_len, _] = q.meta.shape().dims::<4>();
                        let k_len = inputs.k.meta.shape()[2];
                        let index = densify::densify(&sparse, [batch, q_len, k_len], d.column_offset);
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
            block_size: inputs.block_size,
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

    /// The comptime shape of this call's tiled kernels.
    fn tiling(&self) -> Tiling {
        let ([_, _, _, head_dim], _) = self.dims();
        let tiles = Tiles::new(head_dim, self.block_size);
        Tiling {
            head_dim,
            units: tiles.units,
            walk: tiles.walk,
            // at least one, for the shared-memory sizes
            buckets: self.buckets.max(1),
            has_distance: self.has_distance,
            has_dense: self.has_dense,
            has_mask: self.has_mask,
        }
    }

    /// The common inputs as a kernel argument (of the kernel's element types `FK`, `IK`).
    fn inputs<FK: Float, IK: Numeric>(&self) -> tiles::InputsLaunch<FK, IK, R> {
        tiles::InputsLaunch::new(
            self.q.clone().into_tensor_arg(),
            self.k.clone().into_tensor_arg(),
            self.v.clone().into_tensor_arg(),
            self.index.clone().into_tensor_arg(),
            self.table.clone().into_tensor_arg(),
            self.dense.clone().into_tensor_arg(),
            self.mask.clone().into_tensor_arg(),
            self.scale,
            self.column_offset,
        )
    }

    /// One cube per (tile of `units` rows out of `rows`, head, one of `layers`), one unit per
    /// row.
    fn grid(&self, rows: usize, layers: usize) -> (CubeCount, CubeDim) {
        let ([_, heads, _, _], _) = self.dims();
        let units = self.tiling().units;
        let count = |n: usize| u32::try_from(n).unwrap_or_else(|_| panic!("{n} cubes on one axis"));
        (
            CubeCount::Static(
                count(rows.div_ceil(units).max(1)),
                count(heads),
                count(layers),
            ),
            CubeDim::new_1d(units as u32),
        )
    }

    /// The address type covering the inputs and `outputs`.
    fn address_type(&self, outputs: &[&CubeTensor<R>]) -> AddressType {
        let inputs = [
            &self.q,
            &self.k,
            &self.v,
            &self.index,
            &self.table,
            &self.dense,
            &self.mask,
        ];
        address_type(
            inputs
                .into_iter()
                .chain(outputs.iter().copied())
                .map(|t| max_offset(t.meta.shape(), t.meta.strides())),
        )
    }

    /// The forward pass; with too few query tiles to fill the device, split over the keys
    /// ([`split_k`]).
    fn forward(self) -> CubeTensor<R> {
        let ([batch, heads, q_len, head_dim], k_len) = self.dims();
        let tiling = self.tiling();
        let key_tiles = k_len.div_ceil(tiling.walk).max(1);
        let cubes = q_len.div_ceil(tiling.units).max(1) * heads * batch;
        let chunk_tiles = split_k::chunk_tiles(cubes, key_tiles, split_k::target_cubes());
        let splits = key_tiles.div_ceil(chunk_tiles);
        let packed = self.empty(vec![splits * batch, heads, q_len, head_dim + 1]);
        launch_tiled!(
            self,
            forward::forward_kernel,
            rows: q_len,
            layers: splits * batch,
            tensors: [packed],
            scalars: [f32::NEG_INFINITY, chunk_tiles],
        );
        if splits == 1 {
            packed
        } else {
            split_k::merge::<CubeBackend<R, F, I, BT>>(packed, splits)
        }
    }

    fn backward(
        self,
        packed_output: CubeTensor<R>,
        packed_grad: CubeTensor<R>,
    ) -> GraphAttentionGrads<CubeBackend<R, F, I, BT>> {
        let ([batch, heads, q_len, head_dim], k_len) = self.dims();
        let client = self.q.client.clone();
        let units = self.tiling().units;

        // D = rowsum(dO∘O), shifted by the log-sum-exp gradient
        let shift = self.empty(vec![batch, heads, q_len]);
        let (cube_count, cube_dim) = self.grid(q_len, batch);
        backward_queries::shift_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            self.address_type(&[&packed_output, &packed_grad, &shift]),
            packed_output.clone().into_tensor_arg(),
            packed_grad.clone().into_tensor_arg(),
            shift.clone().into_tensor_arg(),
            head_dim,
            units,
            self.q.dtype.into(),
        );

        // dK, dV and the table gradient's partial sums: one cube per key tile
        let d_k = self.empty(vec![batch, heads, k_len, head_dim]);
        let d_v = self.empty(vec![batch, heads, k_len, head_dim]);
        let key_tiles = k_len.div_ceil(units).max(1);
        let table_partial = if self.has_distance {
            self.empty(vec![batch * key_tiles, self.buckets, heads])
        } else {
            self.empty(vec![1, 1, 1])
        };
        launch_tiled!(
            self,
            backward_keys::key_backward_kernel,
            rows: k_len,
            layers: batch,
            tensors: [packed_output, packed_grad, shift, d_k, d_v, table_partial],
            scalars: [],
        );

        // dQ and the dense-bias gradient: one cube per query tile
        let d_q = self.empty(vec![batch, heads, q_len, head_dim]);
        let d_dense = if self.has_dense {
            self.empty(vec![batch, heads, q_len, k_len])
        } else {
            self.empty(vec![1, 1, 1, 1])
        };
        launch_tiled!(
            self,
            backward_queries::query_backward_kernel,
            rows: q_len,
            layers: batch,
            tensors: [packed_output, packed_grad, shift, d_q, d_dense],
            scalars: [],
        );

        let table = self.has_distance.then(|| {
            Tensor::<CubeBackend<R, F, I, BT>, 3>::from_primitive(TensorPrimitive::Float(
                table_partial,
            ))
            .sum_dim(0)
            .reshape([self.buckets, heads])
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

/// Tile sizes: `units` rows per cube (one unit each: query rows for the forward pass and the
/// query backward pass, keys for the key backward pass) and `walk` rows per tile of the other
/// side, staged in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    units: usize,
    walk: usize,
}

impl Tiles {
    /// Units per cube: one plane on most GPUs.
    const UNITS: usize = 32;

    /// `walk` is the op's `block_size` rounded down to a power of two within 8..=32 (16 above
    /// `head_dim` 64, so that the `K` and `V` tiles stay within 16 KiB of shared memory).
    fn new(head_dim: usize, block_size: usize) -> Self {
        let most = if head_dim > 64 { 16 } else { 32 };
        let pow2 = 1usize << (usize::BITS - 1 - block_size.max(1).leading_zeros());
        Self {
            units: Self::UNITS,
            walk: pow2.clamp(8, most),
        }
    }
}

/// One past the largest element offset of a tensor with this shape and these strides (`0` when
/// empty), in 128-bit arithmetic so that it cannot wrap.
fn max_offset(shape: &[usize], strides: &[usize]) -> u128 {
    if shape.contains(&0) {
        return 0;
    }
    1 + shape
        .iter()
        .zip(strides)
        .map(|(&n, &stride)| (n as u128 - 1) * stride as u128)
        .sum::<u128>()
}

/// The kernels' `usize` type: 32-bit while every offset (and every sum of a tensor's offset
/// terms, bounded by [`max_offset`]) stays within `u32`, 64-bit beyond.
fn address_type(spans: impl IntoIterator<Item = u128>) -> AddressType {
    if spans.into_iter().max().unwrap_or(0) > u128::from(u32::MAX) {
        AddressType::U64
    } else {
        AddressType::U32
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_past_u32_pick_64_bit_addresses() {
        // the dense index of 2 sequences of 46,341 nodes: 2·46341² = 4,294,975,362 > 2³²
        let n = 46_341;
        let index = max_offset(&[2, n, n], &[n * n, n, 1]);
        assert_eq!(index, 2 * (n as u128) * (n as u128));
        assert!(index > u128::from(u32::MAX));
        assert_eq!(address_type([index]), AddressType::U64);
        // one sequence of 46,340 nodes stays within u32
        let n = 46_340;
        let index = max_offset(&[1, n, n], &[n * n, n, 1]);
        assert!(index <= u128::from(u32::MAX));
        assert_eq!(address_type([index, 7]), AddressType::U32);
        // a permuted view: the span counts the strides, not the element count
        let span = max_offset(&[1, 8, 65_536, 64], &[1 << 40, 64, 512, 1]);
        assert_eq!(span, 1 + 7 * 64 + 65_535 * 512 + 63);
        // offsets of batch · S · S ≥ 2⁶⁴ do not wrap either
        let huge = max_offset(&[1 << 20, 1 << 22, 1 << 22], &[1 << 44, 1 << 22, 1]);
        assert_eq!(huge, 1u128 << 64);
        assert_eq!(address_type([huge]), AddressType::U64);
        assert_eq!(max_offset(&[3, 0, 5], &[0, 5, 1]), 0);
    }

    #[test]
    fn tiles_follow_block_size_and_head_dim() {
        assert_eq!(Tiles::new(8, 128), Tiles { units: 32, walk: 32 });
        assert_eq!(Tiles::new(64, 16), Tiles { units: 32, walk: 16 });
        assert_eq!(Tiles::new(128, 128), Tiles { units: 32, walk: 16 });
        assert_eq!(Tiles::new(16, 20), Tiles { units: 32, walk: 16 });
        assert_eq!(Tiles::new(16, 1), Tiles { units: 32, walk: 8 });
    }
}

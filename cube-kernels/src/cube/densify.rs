//! The dense key block of a sparse (CSR) distance index, expanded on the device.
//!
//! The tiled kernels read a dense `[batch, q_len, k_len]` index. Expanding a sparse index here
//! keeps it on the device: no read-back, no loop over every pair on the host and no upload of the
//! dense block, once per op call (each layer's forward and backward pass).

use burn::tensor::Int;
use burn_cubecl::cubecl;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use crate::index::SparseBucketIndexPrimitive;

/// Units per cube of [`densify_kernel`].
const UNITS: usize = 256;

/// One unit per query row of `dense` (`[batch, q_len, width]`, filled with the far bucket
/// beforehand): writes the row's stored buckets whose key column lies in
/// `column_start..column_start + width`.
///
/// A row's columns ascend ([`crate::SparseBucketIndex`]'s invariant), so the unit finds the first
/// one at or past `column_start` by binary search and stops at the first one past the block: a
/// context-parallel rank that expands one key block per ring step reads its rows' entries of that
/// block (plus a logarithmic search), not every entry of every row once per block.
#[cube(launch, address_type = "dynamic")]
fn densify_kernel<X: Numeric, Y: Numeric>(
    row_offsets: &Tensor<X>,
    columns: &Tensor<X>,
    buckets: &Tensor<Y>,
    dense: &mut Tensor<Y>,
    column_start: usize,
    #[define(X, Y)] _dtypes: [StorageType; 2],
) {
    let q_len = dense.shape(1);
    let width = dense.shape(2);
    let row = ABSOLUTE_POS;
    if row < dense.shape(0) * q_len {
        let b = row / q_len;
        let i = row % q_len;
        let at = b * row_offsets.stride(0) + i * row_offsets.stride(1);
        let start = u32::cast_from(row_offsets[at]) as usize;
        let end = u32::cast_from(row_offsets[at + row_offsets.stride(1)]) as usize;
        let out = b * dense.stride(0) + i * dense.stride(1);
        // the first entry whose column is at or past `column_start`
        let mut low = start;
        let mut high = end;
        while low < high {
            let middle = (low + high) / 2;
            if (u32::cast_from(columns[middle * columns.stride(0)]) as usize) < column_start {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let stop = column_start + width;
        let mut e = low;
        while e < end {
            let column = u32::cast_from(columns[e * columns.stride(0)]) as usize;
            if column >= stop {
                break;
            }
            dense[out + (column - column_start) * dense.stride(2)] = buckets[e * buckets.stride(0)];
            e += 1;
        }
    }
}

/// The dense buckets `[batch, q_len, k_len]` of key columns `column_start..column_start + k_len`
/// of `sparse`, in the dtype of its buckets (the index dtype,
/// [`crate::DistanceBias::index_dtype`]).
pub(crate) fn densify<R, F, I, BT>(
    sparse: &SparseBucketIndexPrimitive<CubeBackend<R, F, I, BT>>,
    [batch, q_len, k_len]: [usize; 3],
    column_start: usize,
) -> CubeTensor<R>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let buckets = &sparse.buckets;
    let dense = burn::tensor::Tensor::<CubeBackend<R, F, I, BT>, 3, Int>::full(
        [batch, q_len, k_len],
        sparse.far_bucket as i64,
        (&buckets.device, buckets.dtype),
    )
    .into_primitive();
    let rows = batch * q_len;
    if rows == 0 || k_len == 0 {
        return dense;
    }
    let cubes = u32::try_from(rows.div_ceil(UNITS)).unwrap_or_else(|_| panic!("{rows} query rows"));
    let spans = [&sparse.row_offsets, &sparse.columns, buckets, &dense]
        .map(|t| super::max_offset(t.meta.shape(), t.meta.strides()));
    densify_kernel::launch(
        &buckets.client,
        CubeCount::Static(cubes, 1, 1),
        CubeDim::new_1d(UNITS as u32),
        super::address_type(spans),
        sparse.row_offsets.clone().into_tensor_arg(),
        sparse.columns.clone().into_tensor_arg(),
        buckets.clone().into_tensor_arg(),
        dense.clone().into_tensor_arg(),
        column_start,
        [sparse.columns.dtype.into(), buckets.dtype.into()],
    );
    dense
}

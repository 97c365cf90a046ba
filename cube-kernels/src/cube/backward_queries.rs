//! The backward kernels that run one unit per query row:
//!
//! - [`shift_kernel`]: `rowsum(dO∘O) − dLSE` per row (FlashAttention-2's `D`, shifted by the
//!   log-sum-exp gradient), which the two backward kernels read;
//! - [`query_backward_kernel`]: one unit per query row walking the key tiles as the forward
//!   kernel does, `dQ` in registers; the dense-bias gradient block is staged in shared memory and
//!   written coalesced.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::tiles::{
    HeadAt, Inputs, Tiling, alloc_key_tile, axpy_tile, dot_tile, load_key_tile, position, read_row,
    row_offset, tile_count, unrolled, write_row, zeros,
};

/// Row shift `rowsum(dO∘O) − dLSE` (`[batch, heads, q_len]`), one unit per query row of a cube
/// per (query tile, head, batch).
#[cube(launch, address_type = "dynamic")]
pub(crate) fn shift_kernel<F: Float>(
    packed: &Tensor<F>,
    packed_grad: &Tensor<F>,
    shift: &mut Tensor<F>,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
    #[define(F)] _dtype: StorageType,
) {
    let at = position(units);
    let (b, h, i) = (at.b, at.h, at.row);
    if i < packed.shape(2) {
        let o = read_row::<F>(packed, b, h, i, true, F::new(1.0), head_dim);
        let g_at = row_offset::<F>(packed_grad, b, h, i);
        let g_step = packed_grad.stride(3);
        let mut delta = F::new(0.0);
        #[unroll(unrolled(head_dim))]
        for c in 0..head_dim {
            delta += o[c] * packed_grad[g_at + c * g_step];
        }
        let at = row_offset::<F>(shift, b, h, i);
        shift[at] = delta - packed_grad[g_at + head_dim * g_step];
    }
}

/// Backward pass for the queries, one cube per (query tile, head, batch) and one unit per query
/// row, walking the key tiles; writes `dq` and, with a dense bias, its gradient
/// `d_dense [batch, heads, q_len, k_len]`.
#[cube(launch, address_type = "dynamic")]
pub(crate) fn query_backward_kernel<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    packed: &Tensor<F>,
    packed_grad: &Tensor<F>,
    shift: &Tensor<F>,
    d_q: &mut Tensor<F>,
    d_dense: &mut Tensor<F>,
    #[comptime] tiling: Tiling,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let (head_dim, units, walk) = comptime![(tiling.head_dim, tiling.units, tiling.walk)];
    let at = position(units);
    let (b, h, i0, u, i) = (at.b, at.h, at.first, at.unit, at.row);
    let head = HeadAt { b, h };
    let q_len = inputs.q.shape(2);
    let k_len = inputs.k.shape(2);
    let row_ok = i < q_len;
    let scale = F::cast_from(inputs.scale);

    let mut tile = alloc_key_tile::<F, I>(inputs, h, tiling);
    let mut d_s_tile = SharedMemory::<F>::new(units * walk);
    let q_row = read_row::<F>(&inputs.q, b, h, i, row_ok, scale, head_dim);
    let g_row = read_row::<F>(packed_grad, b, h, i, row_ok, F::new(1.0), head_dim);
    let mut lse = F::new(0.0);
    let mut row_shift = F::new(0.0);
    if row_ok {
        lse = packed[row_offset::<F>(packed, b, h, i) + head_dim * packed.stride(3)];
        row_shift = shift[row_offset::<F>(shift, b, h, i)];
    }
    let mut acc = zeros::<F>(head_dim);

    for t in 0..tile_count(k_len, walk) {
        let j0 = t * walk;
        load_key_tile::<F, I>(inputs, &mut tile, &head, i0, j0, tiling);
        if row_ok {
            for c in 0..walk {
                let mut d_s = F::new(0.0);
                if tile.visible[c] > F::new(0.5) {
                    let s = dot_tile::<F>(&q_row, &tile.k, c * head_dim, head_dim)
                        + tile.bias[u * walk + c];
                    let p = (s - lse).exp();
                    let d_p = dot_tile::<F>(&g_row, &tile.v, c * head_dim, head_dim);
                    d_s = p * (d_p - row_shift);
                    axpy_tile::<F>(&mut acc, d_s, &tile.k, c * head_dim, head_dim);
                }
                if comptime![tiling.has_dense] {
                    d_s_tile[u * walk + c] = d_s;
                }
            }
        }
        if comptime![tiling.has_dense] {
            sync_cube();
            let base = row_offset::<F>(d_dense, b, h, i0) + j0 * d_dense.stride(3);
            let mut e = u;
            while e < units * walk {
                let r = e / walk;
                let c = e % walk;
                if i0 + r < q_len && j0 + c < k_len {
                    d_dense[base + r * d_dense.stride(2) + c * d_dense.stride(3)] = d_s_tile[e];
                }
                e += units;
            }
        }
    }

    if row_ok {
        write_row::<F>(d_q, b, h, i, &acc, scale, head_dim);
    }
}

//! The key backward kernel: one unit per key, walking the query tiles (`Q`, `dO`, lse, shift and
//! the bias block in shared memory), `dK` and `dV` in registers; the table gradient goes to a
//! per-unit histogram over the buckets, reduced across the cube in shared memory and written as
//! the cube's partial sums `[batch · key_tiles, buckets, heads]` (no float atomics, which WGSL
//! lacks; summed afterwards with tensor ops).

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::tiles::{
    HeadAt, Inputs, Tiling, axpy_tile, dot_tile, load_bias, load_column, load_rows, load_table,
    load_visible, position, read_row, tile_count, write_row, zeros,
};

/// Backward pass for the keys and values, one cube per (key tile, head, batch) and one unit per
/// key, walking the query tiles; writes `dk`, `dv` and the cube's table-gradient partial sums
/// `table_partial [batch · key_tiles, buckets, heads]`.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn key_backward_kernel<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    packed: &Tensor<F>,
    packed_grad: &Tensor<F>,
    shift: &Tensor<F>,
    d_k: &mut Tensor<F>,
    d_v: &mut Tensor<F>,
    table_partial: &mut Tensor<F>,
    #[comptime] tiling: Tiling,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let (head_dim, units, walk) = comptime![(tiling.head_dim, tiling.units, tiling.walk)];
    let buckets = comptime![tiling.buckets];
    let at = position(units);
    let (b, h, j0, u, j) = (at.b, at.h, at.first, at.unit, at.row);
    let head = HeadAt { b, h };
    let q_len = inputs.q.shape(2);
    let k_len = inputs.k.shape(2);
    let scale = F::cast_from(inputs.scale);

    let mut q_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut g_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut lse = SharedMemory::<F>::new(walk);
    let mut row_shift = SharedMemory::<F>::new(walk);
    let mut bias = SharedMemory::<F>::new(walk * units);
    let mut bucket_tile = SharedMemory::<u32>::new(walk * units);
    let mut visible = SharedMemory::<F>::new(units);
    let table_tile = load_table::<F, I>(inputs, h, tiling);
    load_visible::<F, I>(inputs, b, j0, &mut visible, units, tiling);
    sync_cube();
    let key_ok = visible[u] > F::new(0.5);

    let k_row = read_row::<F>(&inputs.k, b, h, j, key_ok, scale, head_dim);
    let v_row = read_row::<F>(&inputs.v, b, h, j, key_ok, F::new(1.0), head_dim);
    let mut acc_k = zeros::<F>(head_dim);
    let mut acc_v = zeros::<F>(head_dim);
    let mut histogram = Array::<F>::new(buckets);
    for e in 0..buckets {
        histogram[e] = F::new(0.0);
    }

    for t in 0..tile_count(q_len, walk) {
        let i0 = t * walk;
        sync_cube();
        load_rows::<F>(&inputs.q, &head, i0, q_len, &mut q_tile, walk, tiling);
        load_rows::<F>(packed_grad, &head, i0, q_len, &mut g_tile, walk, tiling);
        load_column::<F>(packed, &head, i0, q_len, head_dim, &mut lse, walk, units);
        load_column::<F>(shift, &head, i0, q_len, 0, &mut row_shift, walk, units);
        load_bias::<F, I>(
            inputs,
            &table_tile,
            &head,
            i0,
            j0,
            &mut bias,
            &mut bucket_tile,
            walk,
            units,
            comptime![tiling.has_distance],
            tiling,
        );
        sync_cube();
        // a visible key is visible to every query row of its batch element, whose lse is finite
        if key_ok {
            let mut rows = q_len - i0;
            if rows > walk {
                rows = walk;
            }
            for r in 0..rows {
                let s =
                    dot_tile::<F>(&k_row, &q_tile, r * head_dim, head_dim) + bias[r * units + u];
                let p = (s - lse[r]).exp();
                let d_p = dot_tile::<F>(&v_row, &g_tile, r * head_dim, head_dim);
                let d_s = p * (d_p - row_shift[r]);
                axpy_tile::<F>(&mut acc_v, p, &g_tile, r * head_dim, head_dim);
                axpy_tile::<F>(&mut acc_k, d_s, &q_tile, r * head_dim, head_dim);
                if comptime![tiling.has_distance] {
                    let slot = bucket_tile[r * units + u] as usize;
                    histogram[slot] += d_s;
                }
            }
        }
    }

    if j < k_len {
        write_row::<F>(d_k, b, h, j, &acc_k, scale, head_dim);
        write_row::<F>(d_v, b, h, j, &acc_v, F::new(1.0), head_dim);
    }

    if comptime![tiling.has_distance] {
        // the units' histograms summed per bucket, `units` buckets at a time through a
        // dedicated `[units, units]` tile
        let mut lanes = SharedMemory::<F>::new(units * units);
        let cube = b * tile_count(k_len, units) + CUBE_POS_X as usize;
        let out = cube * table_partial.stride(0) + h * table_partial.stride(2);
        #[unroll]
        for chunk in 0..comptime!(buckets.div_ceil(units)) {
            let first = chunk * units;
            sync_cube();
            #[unroll]
            for c in 0..units {
                if first + c < buckets {
                    lanes[c * units + u] = histogram[first + c];
                }
            }
            sync_cube();
            let slot = first + u;
            if slot < buckets {
                let mut total = F::new(0.0);
                for w in 0..units {
                    total += lanes[u * units + w];
                }
                table_partial[out + slot * table_partial.stride(1)] = total;
            }
        }
    }
}

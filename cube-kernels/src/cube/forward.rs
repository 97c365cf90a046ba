//! The forward kernel: per key tile, `K` and `V` rows, the key mask, and the
//! `(query tile × key tile)` block of the bias (the `u8` index read coalesced and looked up in
//! the head's table, itself in shared memory, plus the dense bias) go to shared memory; each unit
//! computes its row's logits of the tile, then the online softmax with one `exp` per logit and
//! one rescale per tile, and accumulates `P·V` in registers.
//!
//! Split-K: the cube count's `z` axis covers `splits × batch`; cube `z` computes batch element
//! `z mod batch` over the key tiles `(z div batch) · chunk_tiles ..` (at most `chunk_tiles` of
//! them) and writes its partial result at batch index `z` of a `[splits · batch, …]` result,
//! which the launch code merges by log-sum-exp. Without a split (`splits = 1`,
//! `chunk_tiles` = every key tile) that is the whole result.
//!
//! No infinity is ever produced by arithmetic (WGSL may assume finite math): masked keys are
//! skipped, the running max starts at the first visible logit, and the `-inf` log-sum-exp of rows
//! without a visible key is a runtime scalar argument that is only stored.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::tiles::{
    HeadAt, Inputs, Tiling, alloc_key_tile, axpy_tile, dot_tile, load_key_tile, position, read_row,
    row_offset, tile_count, unrolled, write_row, zeros,
};

/// Forward pass, one cube per (query tile, head, key split × batch) and one unit per query row;
/// writes the packed `[splits · batch, heads, q_len, head_dim + 1]` result (output, then
/// log-sum-exp) of each split's `chunk_tiles` key tiles.
#[cube(launch, address_type = "dynamic")]
pub(crate) fn forward_kernel<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    packed: &mut Tensor<F>,
    neg_inf: f32,
    chunk_tiles: usize,
    #[comptime] tiling: Tiling,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let (head_dim, units, walk) = comptime![(tiling.head_dim, tiling.units, tiling.walk)];
    let at = position(units);
    let (h, i0, u, i) = (at.h, at.first, at.unit, at.row);
    let batch = inputs.q.shape(0);
    // `at.b` is the partial result's batch index, `b` the input's
    let b = at.b % batch;
    let head = HeadAt { b, h };
    let q_len = inputs.q.shape(2);
    let k_len = inputs.k.shape(2);
    let row_ok = i < q_len;
    let first_tile = (at.b / batch) * chunk_tiles;
    let mut end_tile = first_tile + chunk_tiles;
    let key_tiles = tile_count(k_len, walk);
    if end_tile > key_tiles {
        end_tile = key_tiles;
    }

    let mut tile = alloc_key_tile::<F, I>(inputs, h, tiling);
    let scale = F::cast_from(inputs.scale);
    let q_row = read_row::<F>(&inputs.q, b, h, i, row_ok, scale, head_dim);
    let mut acc = zeros::<F>(head_dim);
    let mut logits = Array::<F>::new(walk);
    let mut max = F::new(0.0);
    let mut sum = F::new(0.0);
    let mut seen = false;

    for t in first_tile..end_tile {
        load_key_tile::<F, I>(inputs, &mut tile, &head, i0, t * walk, tiling);
        if row_ok {
            let mut tile_max = F::new(0.0);
            let mut any = false;
            for c in 0..walk {
                if tile.visible[c] > F::new(0.5) {
                    let s = dot_tile::<F>(&q_row, &tile.k, c * head_dim, head_dim)
                        + tile.bias[u * walk + c];
                    logits[c] = s;
                    if any {
                        tile_max = tile_max.max(s);
                    } else {
                        tile_max = s;
                        any = true;
                    }
                }
            }
            if any {
                let mut new_max = tile_max;
                if seen {
                    new_max = max.max(tile_max);
                    let alpha = (max - new_max).exp();
                    sum *= alpha;
                    #[unroll(unrolled(head_dim))]
                    for c in 0..head_dim {
                        acc[c] *= alpha;
                    }
                }
                seen = true;
                max = new_max;
                for c in 0..walk {
                    if tile.visible[c] > F::new(0.5) {
                        let p = (logits[c] - max).exp();
                        sum += p;
                        axpy_tile::<F>(&mut acc, p, &tile.v, c * head_dim, head_dim);
                    }
                }
            }
        }
    }

    if row_ok {
        let out_b = at.b;
        let lse_at = row_offset::<F>(packed, out_b, h, i) + head_dim * packed.stride(3);
        if seen {
            write_row::<F>(packed, out_b, h, i, &acc, F::new(1.0) / sum, head_dim);
            packed[lse_at] = max + sum.ln();
        } else {
            write_row::<F>(packed, out_b, h, i, &acc, F::new(0.0), head_dim);
            packed[lse_at] = F::cast_from(neg_inf);
        }
    }
}

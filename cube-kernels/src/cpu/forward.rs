//! The fused forward pass: one rayon task per (batch, head, query tile), an online softmax over
//! the key tiles.

use burn::backend::flex::FlexTensor;
use rayon::prelude::*;

use super::tile::{self, BlockShape, exp, exp_shifted, matmul_acc, matmul_nn};
use super::{Head, HostInputs, KeyTiles, QUERY_TILE, floats, tensor};

/// Forward pass on the host; returns the packed `[batch, heads, q_len, head_dim + 1]` result
/// (output, then the row's log-sum-exp), as
/// [`graph_attention_forward`](crate::GraphAttentionBackend::graph_attention_forward).
pub(super) fn forward(host: &HostInputs) -> FlexTensor {
    let dims = host.dims;
    let (q_len, k_len, dh) = (dims.q_len, dims.k_len, dims.head_dim);
    let stride = dh + 1;
    let mut packed = vec![0.0f32; dims.batch * dims.heads * q_len * stride];
    let q = floats(&host.q);
    let tiles = KeyTiles::new(k_len, host.block_size, dh);
    packed
        .par_chunks_mut(q_len * stride)
        .enumerate()
        .for_each(|(bh, out)| {
            let head = Head::new(host, &tiles, bh);
            out.par_chunks_mut(QUERY_TILE * stride)
                .enumerate()
                .for_each(|(tile_index, out)| {
                    let i0 = tile_index * QUERY_TILE;
                    let rows = out.len() / stride;
                    let q_rows = &q[(bh * q_len + i0) * dh..(bh * q_len + i0 + rows) * dh];
                    let block = QueryBlock { head: &head, i0 };
                    block.run(q_rows, out);
                });
        });
    tensor(packed, vec![dims.batch, dims.heads, q_len, stride])
}

/// One (batch, head, query tile) of the forward pass.
struct QueryBlock<'a> {
    head: &'a Head<'a>,
    /// First query row.
    i0: usize,
}

impl QueryBlock<'_> {
    /// Attention of the query rows `q_rows [rows, head_dim]`, written to `out
    /// [rows, head_dim + 1]`; in 8-lane AVX2 registers where the processor has them.
    fn run(&self, q_rows: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor supports AVX2 (checked just above).
            unsafe { self.run_avx2(q_rows, out) };
            return;
        }
        self.run_portable(q_rows, out);
    }

    /// [`Self::run_portable`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(&self, q_rows: &[f32], out: &mut [f32]) {
        self.run_portable(q_rows, out);
    }

    /// The body of [`Self::run`], inlined into each instruction-set variant.
    #[inline(always)]
    fn run_portable(&self, q_rows: &[f32], out: &mut [f32]) {
        let head = self.head;
        let dh = head.host.dims.head_dim;
        let rows = q_rows.len() / dh;
        let qs: Vec<f32> = q_rows.iter().map(|x| x * head.host.scale).collect();
        let mut max = vec![f32::MIN; rows];
        let mut sum = vec![0.0f32; rows];
        let mut acc = vec![0.0f32; rows * dh];
        let mut s = vec![0.0f32; rows * tile::padded(head.host.block_size)];
        for &(j0, t, offset) in &head.tiles.tiles {
            let shape = BlockShape::new(rows, dh, t);
            let width = shape.width;
            let kt = &head.kt[offset..offset + dh * width];
            let vt = &head.vt[offset..offset + dh * width];
            let s = &mut s[..rows * width];
            matmul_nn(&qs, kt, s, shape);
            for i in 0..rows {
                let row = &mut s[i * width..(i + 1) * width];
                head.host
                    .add_bias(head.b, head.h, self.i0 + i, j0, &mut row[..t]);
                row[t..].fill(f32::NEG_INFINITY);
                let new_max = max[i].max(tile::max(row));
                let alpha = exp(max[i] - new_max);
                exp_shifted(row, new_max);
                sum[i] = sum[i] * alpha + tile::sum(row);
                acc[i * dh..(i + 1) * dh]
                    .iter_mut()
                    .for_each(|a| *a *= alpha);
                max[i] = new_max;
            }
            let v_rows = &head.v_rows[j0 * dh..(j0 + t) * dh];
            matmul_acc(s, v_rows, vt, &mut acc, shape);
        }
        let stride = dh + 1;
        for i in 0..rows {
            // `sum ≥ 1` whenever a key is visible; the clamp only turns 0/0 into 0.
            let inv = 1.0 / sum[i].max(f32::MIN_POSITIVE);
            let out_row = &mut out[i * stride..(i + 1) * stride];
            for d in 0..dh {
                out_row[d] = acc[i * dh + d] * inv;
            }
            out_row[dh] = max[i] + sum[i].ln();
        }
    }
}

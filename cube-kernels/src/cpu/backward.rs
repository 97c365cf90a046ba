//! The fused backward pass, FlashAttention-2 style: the probabilities of each (query tile × key
//! tile) block are recomputed from the saved log-sum-exp, and the block's contributions to every
//! gradient are added while it is in the cache.
//!
//! Tasks are (batch, head, query chunk). A task owns the query and dense-bias gradient rows of its
//! chunk, and keeps its own key, value and table gradients, summed after all tasks of a (batch,
//! head) are done (in a fixed order, so results do not depend on scheduling).

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use rayon::prelude::*;

use super::tile::{self, BlockShape, exp_shifted, matmul_acc, matmul_nn, matmul_tn_acc};
use super::{Head, HostInputs, KeyTiles, QUERY_TILE, TABLE_BANKS, TableBanks, floats, tensor};
use crate::GraphAttentionGrads;

/// Backward pass on the host, as
/// [`graph_attention_backward`](crate::GraphAttentionBackend::graph_attention_backward):
/// `packed_output` and `packed_grad` are contiguous `f32` `[batch, heads, q_len, head_dim + 1]`.
pub(super) fn backward(
    host: &HostInputs,
    packed_output: &FlexTensor,
    packed_grad: &FlexTensor,
) -> GraphAttentionGrads<Flex> {
    let dims = host.dims;
    let (q_len, k_len, dh) = (dims.q_len, dims.k_len, dims.head_dim);
    let tiles = KeyTiles::new(k_len, host.block_size, dh);
    let buckets = host.distance.as_ref().map_or(0, |d| d.buckets);
    let heads_total = dims.batch * dims.heads;
    // Query chunks per (batch, head): enough tasks for every thread twice over.
    let query_tiles = q_len.div_ceil(QUERY_TILE);
    let chunks = (2 * rayon::current_num_threads())
        .div_ceil(heads_total)
        .clamp(1, query_tiles);
    let chunk_rows = query_tiles.div_ceil(chunks) * QUERY_TILE;

    let mut d_q = vec![0.0f32; heads_total * q_len * dh];
    let mut d_k = vec![0.0f32; heads_total * k_len * dh];
    let mut d_v = vec![0.0f32; heads_total * k_len * dh];
    let mut d_dense = host
        .dense
        .as_ref()
        .map(|_| vec![0.0f32; heads_total * q_len * k_len]);
    let mut d_dense_parts: Vec<Option<&mut [f32]>> = match d_dense.as_mut() {
        Some(all) => all.chunks_mut(q_len * k_len).map(Some).collect(),
        None => (0..heads_total).map(|_| None).collect(),
    };
    let saved = Saved {
        output: floats(packed_output),
        grad: floats(packed_grad),
    };
    let tables: Vec<Vec<f64>> = d_q
        .par_chunks_mut(q_len * dh)
        .zip(d_k.par_chunks_mut(k_len * dh))
        .zip(d_v.par_chunks_mut(k_len * dh))
        .zip(d_dense_parts.par_iter_mut())
        .enumerate()
        .map(|(bh, (((d_q, d_k), d_v), d_dense))| {
            let head = HeadBackward {
                head: Head::new(host, &tiles, bh),
                saved: &saved,
                buckets,
            };
            let dense_rows: Vec<Option<&mut [f32]>> = match d_dense.take() {
                Some(all) => all.chunks_mut(chunk_rows * k_len).map(Some).collect(),
                None => (0..q_len.div_ceil(chunk_rows)).map(|_| None).collect(),
            };
            let parts: Vec<TaskGrads> = d_q
                .par_chunks_mut(chunk_rows * dh)
                .zip(dense_rows)
                .enumerate()
                .map(|(c, (d_q, d_dense))| head.run(c * chunk_rows, d_q, d_dense))
                .collect();
            // Sum the tasks' key, value and table gradients in chunk order.
            let mut parts = parts.into_iter();
            let mut total = parts
                .next()
                .unwrap_or_else(|| TaskGrads::zeros(&tiles, buckets));
            for part in parts {
                total.add(&part);
            }
            tiles.untranspose(&total.d_kt, d_k);
            tiles.untranspose(&total.d_vt, d_v);
            total.d_table
        })
        .collect();
    drop(d_dense_parts);

    let table = host.distance.as_ref().map(|_| {
        let mut sums = vec![0.0f64; buckets * dims.heads];
        for (bh, part) in tables.iter().enumerate() {
            let h = bh % dims.heads;
            for (bucket, x) in part.iter().enumerate() {
                sums[bucket * dims.heads + h] += x;
            }
        }
        let sums: Vec<f32> = sums.into_iter().map(|x| x as f32).collect();
        tensor(sums, vec![buckets, dims.heads])
    });
    let shape_q = vec![dims.batch, dims.heads, q_len, dh];
    let shape_k = vec![dims.batch, dims.heads, k_len, dh];
    GraphAttentionGrads {
        q: tensor(d_q, shape_q),
        k: tensor(d_k, shape_k.clone()),
        v: tensor(d_v, shape_k),
        table,
        dense: d_dense.map(|d| tensor(d, vec![dims.batch, dims.heads, q_len, k_len])),
    }
}

/// The forward pass's packed result and its gradient, `[batch, heads, q_len, head_dim + 1]`.
struct Saved<'a> {
    output: &'a [f32],
    grad: &'a [f32],
}

/// Key, value and table gradients of one task.
struct TaskGrads {
    /// Transposed key tiles' gradient (the layout of [`KeyTiles`]).
    d_kt: Vec<f32>,
    d_vt: Vec<f32>,
    /// `[buckets]` of the task's head.
    d_table: Vec<f64>,
}

impl TaskGrads {
    fn zeros(tiles: &KeyTiles, buckets: usize) -> Self {
        Self {
            d_kt: vec![0.0; tiles.len()],
            d_vt: vec![0.0; tiles.len()],
            d_table: vec![0.0; buckets],
        }
    }

    fn add(&mut self, other: &Self) {
        for (a, b) in self.d_kt.iter_mut().zip(&other.d_kt) {
            *a += b;
        }
        for (a, b) in self.d_vt.iter_mut().zip(&other.d_vt) {
            *a += b;
        }
        for (a, b) in self.d_table.iter_mut().zip(&other.d_table) {
            *a += b;
        }
    }
}

/// One query tile of a task: rows `first_row..first_row + rows`, their query and dense-bias
/// gradient rows, and the task's key, value and table gradients to add to.
struct QueryTile<'a> {
    first_row: usize,
    rows: usize,
    d_q: &'a mut [f32],
    d_dense: Option<&'a mut [f32]>,
    grads: &'a mut TaskGrads,
}

/// The backward pass of one (batch, head).
struct HeadBackward<'a> {
    head: Head<'a>,
    saved: &'a Saved<'a>,
    buckets: usize,
}

impl HeadBackward<'_> {
    /// Gradients of the query rows from `first_row` on (`d_q.len() / head_dim` of them): writes
    /// their query gradient into `d_q` and, with a dense bias, its gradient into `d_dense`;
    /// returns the key, value and table gradients of these rows' attention.
    fn run(&self, first_row: usize, d_q: &mut [f32], mut d_dense: Option<&mut [f32]>) -> TaskGrads {
        let dims = self.head.host.dims;
        let dh = dims.head_dim;
        let mut grads = TaskGrads::zeros(self.head.tiles, self.buckets);
        let chunk = d_q.len() / dh;
        let mut i0 = 0;
        while i0 < chunk {
            let rows = (chunk - i0).min(QUERY_TILE);
            let d_dense_rows = d_dense
                .as_deref_mut()
                .map(|all| &mut all[i0 * dims.k_len..(i0 + rows) * dims.k_len]);
            self.query_tile(QueryTile {
                first_row: first_row + i0,
                rows,
                d_q: &mut d_q[i0 * dh..(i0 + rows) * dh],
                d_dense: d_dense_rows,
                grads: &mut grads,
            });
            i0 += rows;
        }
        grads
    }

    /// One query tile against every key tile; in 8-lane AVX2 registers where the processor has
    /// them.
    fn query_tile(&self, job: QueryTile<'_>) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor supports AVX2 (checked just above).
            unsafe { self.query_tile_avx2(job) };
            return;
        }
        self.query_tile_portable(job);
    }

    /// [`Self::query_tile_portable`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn query_tile_avx2(&self, job: QueryTile<'_>) {
        self.query_tile_portable(job);
    }

    /// The body of [`Self::query_tile`], inlined into each instruction-set variant.
    #[inline(always)]
    fn query_tile_portable(&self, job: QueryTile<'_>) {
        let QueryTile {
            first_row,
            rows,
            d_q,
            mut d_dense,
            grads,
        } = job;
        let head = &self.head;
        let host = head.host;
        let dims = host.dims;
        let (dh, k_len) = (dims.head_dim, dims.k_len);
        let stride = dh + 1;
        let bh = head.b * dims.heads + head.h;
        let q = &floats(&host.q)[(bh * dims.q_len + first_row) * dh..];
        let qs: Vec<f32> = q[..rows * dh].iter().map(|x| x * host.scale).collect();
        // Per row: the saved lse (-inf → f32::MIN, so that masked logits give e^-inf = 0), dO,
        // and the shift D − dLSE with D = rowsum(dO∘O).
        let mut lse = vec![0.0f32; rows];
        let mut d_out = vec![0.0f32; rows * dh];
        let mut shift = vec![0.0f32; rows];
        for i in 0..rows {
            let at = (bh * dims.q_len + first_row + i) * stride;
            let out = &self.saved.output[at..at + stride];
            let grad = &self.saved.grad[at..at + stride];
            lse[i] = out[dh].max(f32::MIN);
            d_out[i * dh..(i + 1) * dh].copy_from_slice(&grad[..dh]);
            let dot: f32 = out[..dh].iter().zip(&grad[..dh]).map(|(o, g)| o * g).sum();
            shift[i] = dot - grad[dh];
        }
        let max_width = tile::padded(host.block_size);
        let mut p = vec![0.0f32; rows * max_width];
        let mut d_s = vec![0.0f32; rows * max_width];
        let mut banks: TableBanks = [[0.0; 256]; TABLE_BANKS];
        for &(j0, t, offset) in &head.tiles.tiles {
            let shape = BlockShape::new(rows, dh, t);
            let width = shape.width;
            let block = offset..offset + dh * width;
            let (kt, vt) = (&head.kt[block.clone()], &head.vt[block.clone()]);
            let (p, d_s) = (&mut p[..rows * width], &mut d_s[..rows * width]);
            matmul_nn(&qs, kt, p, shape);
            // dP = dO·vᵀ, into d_s
            matmul_nn(&d_out, vt, d_s, shape);
            for i in 0..rows {
                let p_row = &mut p[i * width..(i + 1) * width];
                host.add_bias(head.b, head.h, first_row + i, j0, &mut p_row[..t]);
                p_row[t..].fill(f32::NEG_INFINITY);
                exp_shifted(p_row, lse[i]);
                let d_s_row = &mut d_s[i * width..(i + 1) * width];
                for (ds, &pr) in d_s_row.iter_mut().zip(p_row.iter()) {
                    *ds = pr * (*ds - shift[i]);
                }
                if let Some(d) = &host.distance {
                    d.add_table_grad(head.b, first_row + i, j0, &dims, &d_s_row[..t], &mut banks);
                }
                if let Some(d_dense) = d_dense.as_deref_mut() {
                    d_dense[i * k_len + j0..i * k_len + j0 + t].copy_from_slice(&d_s_row[..t]);
                }
            }
            let k_rows = &head.k_rows[j0 * dh..(j0 + t) * dh];
            matmul_acc(d_s, k_rows, kt, d_q, shape);
            matmul_tn_acc(&qs, d_s, &mut grads.d_kt[block.clone()], shape);
            matmul_tn_acc(&d_out, p, &mut grads.d_vt[block], shape);
            // fold the banks into the task's f64 sums once per block
            for (bucket, total) in grads.d_table.iter_mut().enumerate() {
                for bank in &mut banks {
                    *total += f64::from(std::mem::take(&mut bank[bucket]));
                }
            }
        }
        d_q.iter_mut().for_each(|x| *x *= host.scale);
    }
}

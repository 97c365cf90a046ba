//! Reference implementation of the op with Burn tensor ops, one key tile at a time. It runs on
//! every backend and defines the numerics that custom kernels reproduce: it is what
//! [`GraphAttentionBackend`](crate::GraphAttentionBackend)'s default methods run, and it is public
//! so that tests and benchmarks can compare a backend's own kernels with it on that backend.
//!
//! Forward (online softmax): for each key tile `s = qs·kᵀ + bias` (masked keys `-inf`),
//! `m' = max(m, rowmax(s))`, `l = l·e^(m−m') + rowsum(e^(s−m'))`,
//! `acc = acc·e^(m−m') + e^(s−m')·v`; finally `out = acc / l`, `lse = m + ln l`. The running max
//! starts at `f32::MIN` instead of `-inf`, so fully masked tiles give `e^(-inf) = 0` and never
//! `e^(-inf + inf) = NaN`; a row with no visible key ends with `l = 0`, `out = 0`, `lse = -inf`.
//!
//! Per-row shifts (`− m'`, `− lse`, `− D + dLSE`) are folded into the tile matmuls as one extra
//! column (`[q | −c]·[k | 1]ᵀ = q·kᵀ − c`) instead of broadcasting a `[q_len, 1]` tensor over the
//! tile, which Burn's CPU backends do an order of magnitude slower than the matmul.
//!
//! Backward: `P = e^(s − lse)` recomputed per tile, `D = rowsum(dO∘O)`,
//! `dS = P∘(dO·vᵀ − D + dLSE)`, `dQ = scale·dS·k`, `dK = dSᵀ·qs`, `dV = Pᵀ·dO`, the dense bias gets
//! `dS` and the table gets `dS` summed into its buckets.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Bool, IndexingUpdateOp, Int, Tensor, TensorPrimitive};

use crate::primitives::{DistanceBiasPrimitive, GraphAttentionGrads, GraphAttentionInputs};
use crate::bias::bytes_tensor;
use crate::index::{BucketIndexPrimitive, HostCsr, SparseBucketIndexPrimitive};
use crate::precision::{narrow_grads, widen, widen_inputs};

pub mod sparse_edge;

/// Wraps a float primitive into a tensor.
pub(crate) fn float<B: Backend, const D: usize>(primitive: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

/// Unwraps a float tensor into its primitive.
pub(crate) fn primitive<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// Distance bias of the tile loop, with the table transposed for a contiguous gather.
struct TileDistance<B: Backend> {
    /// The buckets of the pairs.
    index: TileIndex<B>,
    /// `[heads, buckets]`.
    table_t: Tensor<B, 2>,
    /// First index column of the key block.
    column_offset: usize,
}

/// The distance index as the tile loop reads it.
enum TileIndex<B: Backend> {
    /// `[batch, q_len, total_k_len]`.
    Dense(Tensor<B, 3, Int>),
    /// Read to the host once; each key tile is expanded there and uploaded.
    Sparse(HostCsr),
}

/// Bucket indices of one key tile: a flat `[q_len · tile]` index per batch element, or `None`
/// without a distance bias.
type TileBuckets<B> = Option<Vec<Tensor<B, 1, Int>>>;

/// The inputs of the tile loop as tensors.
struct Tiles<B: Backend> {
    /// Pre-scaled queries `scale · q`, `[batch, heads, q_len, head_dim]`.
    qs: Tensor<B, 4>,
    /// `[batch, heads, k_len, head_dim]`.
    k: Tensor<B, 4>,
    /// `[batch, heads, k_len, head_dim]`.
    v: Tensor<B, 4>,
    distance: Option<TileDistance<B>>,
    /// `[batch, heads, q_len, k_len]`.
    dense: Option<Tensor<B, 4>>,
    /// The key padding mask as an extra key column: `0` for a visible key, `-inf` for a
    /// masked one, `[batch, heads, k_len, 1]` (see [`Self::keys_augmented`]).
    key_mask: Option<Tensor<B, 4>>,
    scale: f32,
    block_size: usize,
    batch: usize,
    heads: usize,
    q_len: usize,
    k_len: usize,
    head_dim: usize,
}

impl<B: Backend> Tiles<B> {
    fn new(inputs: GraphAttentionInputs<B>) -> Self {
        let q: Tensor<B, 4> = float(inputs.q);
        let [batch, heads, q_len, head_dim] = q.dims();
        let k: Tensor<B, 4> = float(inputs.k);
        let k_len = k.dims()[2];
        let (device, dtype) = (k.device(), k.dtype());
        Self {
            qs: q.mul_scalar(inputs.scale),
            k,
            v: float(inputs.v),
            distance: inputs.distance.map(|d| TileDistance {
                index: match d.index {
                    BucketIndexPrimitive::Dense(index) => {
                        TileIndex::Dense(Tensor::from_primitive(index))
                    }
                    BucketIndexPrimitive::Sparse(index) => {
                        TileIndex::Sparse(HostCsr::read::<B>(&index))
                    }
                },
                table_t: float::<B, 2>(d.table).transpose(),
                column_offset: d.column_offset,
            }),
            dense: inputs.dense.map(float),
            key_mask: inputs.key_padding_mask.map(|mask| {
                let mask: Tensor<B, 2, Bool> = Tensor::from_primitive(mask);
                let [b, k_len] = mask.dims();
                Tensor::<B, 2>::zeros([b, k_len], (&device, dtype))
                    .mask_fill(mask, f32::NEG_INFINITY)
                    .reshape([b, 1, k_len, 1])
                    .expand([b, heads, k_len, 1])
            }),
            scale: inputs.scale,
            block_size: inputs.block_size.max(1),
            batch,
            heads,
            q_len,
            k_len,
            head_dim,
        }
    }

    /// Key ranges of the tiles.
    fn ranges(&self) -> impl Iterator<Item = (usize, usize)> + use<B> {
        let (k_len, block) = (self.k_len, self.block_size);
        (0..k_len)
            .step_by(block)
            .map(move |j0| (j0, (j0 + block).min(k_len)))
    }

    /// Bucket indices of the tile, one `[q_len · tile]` tensor (row-major over `[q_len, tile]`)
    /// per batch element, if there is a distance bias.
    fn tile_buckets(&self, j0: usize, j1: usize) -> TileBuckets<B> {
        self.distance.as_ref().map(|d| {
            let c0 = d.column_offset;
            match &d.index {
                TileIndex::Dense(index) => (0..self.batch)
                    .map(|b| {
                        index
                            .clone()
                            .slice([b..b + 1, 0..self.q_len, c0 + j0..c0 + j1])
                            .reshape([self.q_len * (j1 - j0)])
                    })
                    .collect(),
                TileIndex::Sparse(csr) => {
                    let device = self.qs.device();
                    let tile = csr.densify(self.batch, c0 + j0..c0 + j1);
                    let per_batch = self.q_len * (j1 - j0);
                    (0..self.batch)
                        .map(|b| {
                            let values = tile[b * per_batch..(b + 1) * per_batch].to_vec();
                            bytes_tensor::<B, 1>(values, [per_batch], &device)
                                .unwrap_or_else(|err| unreachable!("sized above: {err}"))
                        })
                        .collect()
                }
            }
        })
    }

    /// Additive bias of the tile `[batch, heads, q_len, tile]` (distance plus dense), if any,
    /// and the tile's bucket indices (see [`Self::tile_buckets`]).
    ///
    /// The table is gathered per batch element so that every result is contiguous in
    /// `[heads, q_len, tile]` order (a permuted view would make the later additions slow).
    fn bias(&self, j0: usize, j1: usize) -> (Option<Tensor<B, 4>>, TileBuckets<B>) {
        let (b, h, nq, t) = (self.batch, self.heads, self.q_len, j1 - j0);
        let buckets = self.tile_buckets(j0, j1);
        let distance = match (&self.distance, &buckets) {
            (Some(d), Some(per_batch)) => {
                let parts: Vec<Tensor<B, 4>> = per_batch
                    .iter()
                    .map(|idx| {
                        d.table_t
                            .clone()
                            .select(1, idx.clone())
                            .reshape([1, h, nq, t])
                    })
                    .collect();
                Some(Tensor::cat(parts, 0))
            }
            _ => None,
        };
        let dense = self
            .dense
            .as_ref()
            .map(|dense| dense.clone().slice([0..b, 0..h, 0..nq, j0..j1]));
        let bias = match (distance, dense) {
            (Some(a), Some(c)) => Some(a + c),
            (a, c) => a.or(c),
        };
        (bias, buckets)
    }

    /// Keys of the tile with a column of ones appended, and with a key padding mask its
    /// column of `0` / `-inf`: `[batch, heads, tile, head_dim + 1 (+ 1)]`.
    fn keys_augmented(&self, j0: usize, j1: usize) -> Tensor<B, 4> {
        let (b, h) = (self.batch, self.heads);
        let k = self.k.clone().slice([0..b, 0..h, j0..j1]);
        let mut columns = vec![k.clone(), ones_column(&k)];
        if let Some(mask) = &self.key_mask {
            columns.push(mask.clone().slice([0..b, 0..h, j0..j1]));
        }
        Tensor::cat(columns, 3)
    }

    /// `[qs | shift]`, with a key padding mask a column of ones appended (it picks up the keys'
    /// `0` / `-inf` column): the left operand of [`Self::shifted_logits`].
    fn queries_augmented(&self, shift: Tensor<B, 4>) -> Tensor<B, 4> {
        let mut columns = vec![self.qs.clone(), shift.clone()];
        if self.key_mask.is_some() {
            columns.push(ones_column(&shift));
        }
        Tensor::cat(columns, 3)
    }

    /// `q_aug·k_augᵀ + bias`, masked keys at `-inf`: `[batch, heads, q_len, tile]`.
    ///
    /// With `q_aug = [qs | -c | 1]` and `k_aug = [k | 1 | m]` this is `s − c + m` for a per-row
    /// shift `c` and the key mask `m ∈ {0, -inf}`, computed inside the matmul: Burn backends
    /// broadcast a `[.., q_len, 1]` operand over the last dimension (or a `[batch, 1, 1, tile]`
    /// mask over the rows) far slower than they multiply one more column. A visible key adds
    /// `1 · 0`, so its logit is the one without a mask, bit for bit.
    fn shifted_logits(
        &self,
        q_aug: Tensor<B, 4>,
        k_aug: Tensor<B, 4>,
        bias: Option<&Tensor<B, 4>>,
    ) -> Tensor<B, 4> {
        let s = q_aug.matmul(k_aug.swap_dims(2, 3));
        match bias {
            Some(bias) => s + bias.clone(),
            None => s,
        }
    }
}

/// A column of ones shaped like `like` with its last dimension 1.
fn ones_column<B: Backend>(like: &Tensor<B, 4>) -> Tensor<B, 4> {
    let [b, h, n, _] = like.dims();
    Tensor::ones([b, h, n, 1], (&like.device(), like.dtype()))
}

/// Bytes of one tile's logits (`[chunk, heads, q_len, tile]` f32) the reference op aims to stay
/// under: a chunk of batch elements whose tiles fit the caches runs about twice as fast per
/// element as one whose tiles do not (on Flex, 4 × 4 × 512 × 128 floats: 20.7 ms per element
/// against 8.2 ms one at a time).
const TILE_BYTES: usize = 1 << 20;

/// The batch ranges the reference op runs one after the other: as many batch elements at once
/// as keep a tile within `tile_bytes` ([`TILE_BYTES`]; at least one element). Every batch element is independent, so
/// outputs do not depend on the split.
fn batch_chunks<B: Backend>(
    inputs: &GraphAttentionInputs<B>,
    tile_bytes: usize,
) -> Vec<std::ops::Range<usize>> {
    let [batch, heads, q_len, _] = float::<B, 4>(inputs.q.clone()).dims();
    let tile_bytes_per_element = heads * q_len * inputs.block_size.max(1) * 4;
    let chunk = (tile_bytes / tile_bytes_per_element.max(1)).clamp(1, batch.max(1));
    (0..batch)
        .step_by(chunk)
        .map(|start| start..(start + chunk).min(batch))
        .collect()
}

/// The batch elements `range` of a `[batch, ...]` float primitive.
fn batch_rows<B: Backend>(t: &FloatTensor<B>, range: std::ops::Range<usize>) -> FloatTensor<B> {
    primitive(float::<B, 4>(t.clone()).slice(range))
}

/// The inputs of the batch elements `range`.
fn batch_slice<B: Backend>(
    inputs: &GraphAttentionInputs<B>,
    range: std::ops::Range<usize>,
) -> GraphAttentionInputs<B> {
    let rows4 = |t: &FloatTensor<B>| batch_rows::<B>(t, range.clone());
    GraphAttentionInputs {
        q: rows4(&inputs.q),
        k: rows4(&inputs.k),
        v: rows4(&inputs.v),
        distance: inputs.distance.as_ref().map(|d| DistanceBiasPrimitive {
            index: match &d.index {
                BucketIndexPrimitive::Dense(index) => BucketIndexPrimitive::Dense(
                    Tensor::<B, 3, Int>::from_primitive(index.clone())
                        .slice(range.clone())
                        .into_primitive(),
                ),
                // offsets run over the whole batch: a batch range is a slice of them alone
                BucketIndexPrimitive::Sparse(index) => {
                    BucketIndexPrimitive::Sparse(SparseBucketIndexPrimitive {
                        row_offsets: Tensor::<B, 2, Int>::from_primitive(index.row_offsets.clone())
                            .slice(range.clone())
                            .into_primitive(),
                        ..index.clone()
                    })
                }
            },
            table: d.table.clone(),
            column_offset: d.column_offset,
        }),
        dense: inputs.dense.as_ref().map(rows4),
        key_padding_mask: inputs.key_padding_mask.as_ref().map(|mask| {
            Tensor::<B, 2, Bool>::from_primitive(mask.clone())
                .slice(range.clone())
                .into_primitive()
        }),
        scale: inputs.scale,
        block_size: inputs.block_size,
    }
}

/// Reference forward pass; see [`GraphAttentionBackend::graph_attention_forward`](crate::GraphAttentionBackend::graph_attention_forward).
///
/// Runs chunks of the batch one after the other, as many elements at once as keep a tile's
/// logits near 1 MiB. `f16` and `bf16` inputs are computed in `f32`, and the packed result is
/// `f32` (see [`compute_dtype`](crate::compute_dtype)).
pub fn forward<B: Backend>(inputs: GraphAttentionInputs<B>) -> FloatTensor<B> {
    let (inputs, _) = widen_inputs(inputs);
    forward_in_chunks(inputs, TILE_BYTES)
}

/// [`forward`] with the chunks of [`batch_chunks`] at `tile_bytes`.
fn forward_in_chunks<B: Backend>(
    inputs: GraphAttentionInputs<B>,
    tile_bytes: usize,
) -> FloatTensor<B> {
    let chunks = batch_chunks(&inputs, tile_bytes);
    if chunks.len() == 1 {
        return forward_chunk(inputs);
    }
    let parts: Vec<Tensor<B, 4>> = chunks
        .into_iter()
        .map(|range| float(forward_chunk(batch_slice(&inputs, range))))
        .collect();
    primitive(Tensor::cat(parts, 0))
}

/// [`forward`] of the whole given batch at once.
fn forward_chunk<B: Backend>(inputs: GraphAttentionInputs<B>) -> FloatTensor<B> {
    let tiles = Tiles::new(inputs);
    let (b, h, nq, dh) = (tiles.batch, tiles.heads, tiles.q_len, tiles.head_dim);
    let device = tiles.qs.device();
    let dtype = tiles.qs.dtype();
    let mut max = Tensor::<B, 4>::full([b, h, nq, 1], f32::MIN, (&device, dtype));
    let mut sum = Tensor::<B, 4>::zeros([b, h, nq, 1], (&device, dtype));
    let mut acc = Tensor::<B, 4>::zeros([b, h, nq, dh], (&device, dtype));
    let zero_shift = Tensor::<B, 4>::zeros([b, h, nq, 1], (&device, dtype));
    let q_unshifted = tiles.queries_augmented(zero_shift);
    for (j0, j1) in tiles.ranges() {
        let (bias, _) = tiles.bias(j0, j1);
        let k_aug = tiles.keys_augmented(j0, j1);
        let s = tiles.shifted_logits(q_unshifted.clone(), k_aug.clone(), bias.as_ref());
        let new_max = max.clone().max_pair(s.max_dim(3));
        let alpha = (max - new_max.clone()).exp();
        // e^(s − m'), with the shift done by the matmul (see `shifted_logits`)
        let q_shifted = tiles.queries_augmented(-new_max.clone());
        let p = tiles.shifted_logits(q_shifted, k_aug, bias.as_ref()).exp();
        let v_tile = tiles.v.clone().slice([0..b, 0..h, j0..j1]);
        sum = sum * alpha.clone() + p.clone().sum_dim(3);
        acc = acc * alpha + p.matmul(v_tile);
        max = new_max;
    }
    // sum >= 1 whenever a key is visible (the row maximum contributes e^0); clamping only turns
    // 0/0 into 0 for rows without visible keys.
    let out = acc / sum.clone().clamp_min(f32::MIN_POSITIVE);
    let lse = max + sum.log();
    primitive(Tensor::cat(vec![out, lse], 3))
}

/// Reference backward pass; see [`GraphAttentionBackend::graph_attention_backward`](crate::GraphAttentionBackend::graph_attention_backward).
///
/// Runs chunks of the batch one after the other, as [`forward`]; the table gradient is their
/// sum. `f16` and `bf16` inputs are computed in `f32` as in [`forward`]; each gradient has the
/// dtype of its input.
pub fn backward<B: Backend>(
    inputs: GraphAttentionInputs<B>,
    packed_output: FloatTensor<B>,
    packed_grad: FloatTensor<B>,
) -> GraphAttentionGrads<B> {
    let (inputs, dtypes) = widen_inputs(inputs);
    let grads = backward_in_chunks(
        inputs,
        widen::<B>(packed_output),
        widen::<B>(packed_grad),
        TILE_BYTES,
    );
    narrow_grads(grads, dtypes)
}

/// [`backward`] with the chunks of [`batch_chunks`] at `tile_bytes`.
fn backward_in_chunks<B: Backend>(
    inputs: GraphAttentionInputs<B>,
    packed_output: FloatTensor<B>,
    packed_grad: FloatTensor<B>,
    tile_bytes: usize,
) -> GraphAttentionGrads<B> {
    let chunks = batch_chunks(&inputs, tile_bytes);
    if chunks.len() == 1 {
        return backward_chunk(inputs, packed_output, packed_grad);
    }
    let parts: Vec<GraphAttentionGrads<B>> = chunks
        .into_iter()
        .map(|range| {
            backward_chunk(
                batch_slice(&inputs, range.clone()),
                batch_rows::<B>(&packed_output, range.clone()),
                batch_rows::<B>(&packed_grad, range),
            )
        })
        .collect();
    let cat = |tensors: Vec<FloatTensor<B>>| {
        primitive(Tensor::cat(
            tensors.into_iter().map(float::<B, 4>).collect(),
            0,
        ))
    };
    let table = parts
        .iter()
        .filter_map(|g| g.table.clone().map(float::<B, 2>))
        .reduce(|a, b| a + b)
        .map(primitive);
    GraphAttentionGrads {
        q: cat(parts.iter().map(|g| g.q.clone()).collect()),
        k: cat(parts.iter().map(|g| g.k.clone()).collect()),
        v: cat(parts.iter().map(|g| g.v.clone()).collect()),
        table,
        dense: parts
            .iter()
            .map(|g| g.dense.clone())
            .collect::<Option<Vec<_>>>()
            .map(cat),
    }
}

/// [`backward`] of the whole given batch at once.
fn backward_chunk<B: Backend>(
    inputs: GraphAttentionInputs<B>,
    packed_output: FloatTensor<B>,
    packed_grad: FloatTensor<B>,
) -> GraphAttentionGrads<B> {
    let tiles = Tiles::new(inputs);
    let (b, h, nq, dh) = (tiles.batch, tiles.heads, tiles.q_len, tiles.head_dim);
    let packed: Tensor<B, 4> = float(packed_output);
    let grad: Tensor<B, 4> = float(packed_grad);
    let out = packed.clone().slice([0..b, 0..h, 0..nq, 0..dh]);
    // -inf (no visible key) becomes f32::MIN: e^(-inf - f32::MIN) = 0 on masked logits.
    let lse = packed
        .slice([0..b, 0..h, 0..nq, dh..dh + 1])
        .clamp_min(f32::MIN);
    let d_out = grad.clone().slice([0..b, 0..h, 0..nq, 0..dh]);
    let d_lse = grad.slice([0..b, 0..h, 0..nq, dh..dh + 1]);
    // dS = P∘(dP − D + dLSE) = P∘(dP − shift)
    let shift = (d_out.clone() * out).sum_dim(3) - d_lse;

    let device = tiles.qs.device();
    let dtype = tiles.qs.dtype();
    // shifts folded into the matmuls (see `shifted_logits`):
    // [qs | -lse]·[k | 1]ᵀ = s − lse and [dO | -shift]·[v | 1]ᵀ = dP − shift
    let q_aug = tiles.queries_augmented(-lse);
    let d_out_aug = Tensor::cat(vec![d_out.clone(), -shift], 3);
    let mut d_q = Tensor::<B, 4>::zeros([b, h, nq, dh], (&device, dtype));
    let mut d_k_tiles = Vec::new();
    let mut d_v_tiles = Vec::new();
    let mut d_dense_tiles = Vec::new();
    let mut d_table_t = tiles.distance.as_ref().map(|d| d.table_t.zeros_like());
    for (j0, j1) in tiles.ranges() {
        let t = j1 - j0;
        let (bias, buckets) = tiles.bias(j0, j1);
        let k_aug = tiles.keys_augmented(j0, j1);
        let p = tiles
            .shifted_logits(q_aug.clone(), k_aug, bias.as_ref())
            .exp();
        let k_tile = tiles.k.clone().slice([0..b, 0..h, j0..j1]);
        let v_tile = tiles.v.clone().slice([0..b, 0..h, j0..j1]);
        let v_aug = Tensor::cat(vec![v_tile.clone(), ones_column(&v_tile)], 3);
        d_v_tiles.push(p.clone().swap_dims(2, 3).matmul(d_out.clone()));
        let d_s = p * d_out_aug.clone().matmul(v_aug.swap_dims(2, 3));
        d_q = d_q + d_s.clone().matmul(k_tile);
        d_k_tiles.push(d_s.clone().swap_dims(2, 3).matmul(tiles.qs.clone()));
        if let (Some(mut acc), Some(per_batch)) = (d_table_t.take(), buckets) {
            for (batch, idx) in per_batch.into_iter().enumerate() {
                let values = d_s
                    .clone()
                    .slice([batch..batch + 1, 0..h, 0..nq, 0..t])
                    .reshape([h, nq * t]);
                acc = acc.select_assign(1, idx, values, IndexingUpdateOp::Add);
            }
            d_table_t = Some(acc);
        }
        if tiles.dense.is_some() {
            d_dense_tiles.push(d_s);
        }
    }
    let cat_or_zeros = |parts: Vec<Tensor<B, 4>>, dim: usize, like: &Tensor<B, 4>| {
        if parts.is_empty() {
            like.zeros_like()
        } else {
            Tensor::cat(parts, dim)
        }
    };
    GraphAttentionGrads {
        q: primitive(d_q.mul_scalar(tiles.scale)),
        k: primitive(cat_or_zeros(d_k_tiles, 2, &tiles.k)),
        v: primitive(cat_or_zeros(d_v_tiles, 2, &tiles.v)),
        table: d_table_t.map(|t| primitive(t.transpose())),
        dense: tiles
            .dense
            .as_ref()
            .map(|dense| primitive(cat_or_zeros(d_dense_tiles, 3, dense))),
    }
}

#[cfg(test)]
mod tests;

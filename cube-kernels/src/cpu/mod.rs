//! The op fused for the [`Flex`] CPU backend: one pass over the (query tile × key tile) blocks per
//! (batch, head), in plain Rust on the tensors' host memory, parallel with rayon.
//!
//! Per block the forward pass computes `qs·kᵀ` once, adds the bias gathered from the distance
//! index and the table (plus a dense bias and the key mask), and runs the online softmax and `P·V`
//! on the block while it is in the cache; the backward pass recomputes the block the same way,
//! FlashAttention-2 style. The numerics are those of the [reference](mod@crate::reference) (same
//! running maximum from `f32::MIN`, same treatment of rows without a visible key), within float
//! rounding: the arithmetic is `f32` with another summation order and a polynomial `exp`.
//!
//! `f16` and `bf16` inputs are converted to `f32` copies first (whole tensors, before the tiling)
//! and take this path in `f32`: the packed result (output and log-sum-exp) is `f32`, the
//! gradients are cast back to their inputs' dtypes. `f64` inputs, or a distance index whose
//! buckets do not fit a byte, go to the reference implementation instead.
//!
//! Sparse edge attention (TorchGT's mode) has its own fused path, [`sparse_edge`].

mod backward;
mod forward;
mod sparse_edge;
mod tile;

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, TensorData, TensorMetadata};

use crate::primitives::{GraphAttentionInputs, SparseEdgeGrads, SparseEdgeInputs, SparseEdgeOutput};
use crate::index::{BucketIndexPrimitive, HostCsr};
use crate::precision::{narrow_grads, widen, widen_inputs};

use backward::backward;
use forward::forward;

/// Query rows per forward task and per backward tile.
const QUERY_TILE: usize = 64;

/// Keys per tile (the block size of this path): the op's `block_size`, kept within what keeps a
/// tile's scratch rows in the L1 and L2 caches and amortizes the per-tile work.
fn clamped_block_size(block_size: usize) -> usize {
    block_size.clamp(16, 512)
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    heads: usize,
    q_len: usize,
    k_len: usize,
    head_dim: usize,
}

/// The distance bias on the host: the index and the table transposed to `[heads, buckets]`.
struct HostDistance {
    index: HostIndex,
    column_offset: usize,
    /// Per head the table's column, padded with zeros to 256 entries so that any `u8` bucket
    /// indexes it without a bounds check.
    table_t: Vec<[f32; 256]>,
    buckets: usize,
}

/// The buckets of the pairs, dense or sparse.
enum HostIndex {
    /// `[batch, q_len, total_k_len]` buckets.
    Dense {
        bytes: HostBytes,
        total_k_len: usize,
    },
    /// The stored pairs per row; every other pair is the far bucket.
    Sparse(HostCsr),
}

/// Independent accumulators of the table gradient, so that consecutive keys with the same bucket
/// do not wait on each other's additions.
pub(super) const TABLE_BANKS: usize = 4;

/// Table gradient accumulators of a task: [`TABLE_BANKS`] banks of 256 buckets.
pub(super) type TableBanks = [[f32; 256]; TABLE_BANKS];

impl HostDistance {
    /// The table column of head `h` (`[buckets]`, padded to 256).
    #[inline(always)]
    fn table(&self, h: usize) -> &[f32; 256] {
        &self.table_t[h]
    }

    /// Adds the table bias of query row `i` (batch `b`, head `h`) over the block's keys
    /// `j0..j0 + row.len()` to `row`.
    #[inline(always)]
    fn add_bias(&self, b: usize, h: usize, i: usize, j0: usize, dims: &Dims, row: &mut [f32]) {
        let table = self.table(h);
        let c0 = self.column_offset + j0;
        match &self.index {
            HostIndex::Dense { bytes, total_k_len } => {
                let start = (b * dims.q_len + i) * total_k_len + c0;
                let buckets = &bytes.as_slice()[start..start + row.len()];
                for (s, &bucket) in row.iter_mut().zip(buckets) {
                    *s += table[usize::from(bucket)];
                }
            }
            HostIndex::Sparse(csr) => {
                // the same additions as the dense index would make, in the same places
                let far = table[csr.far_bucket];
                let (columns, buckets) = csr.row(b, i, c0..c0 + row.len());
                let mut next = 0;
                for (&column, &bucket) in columns.iter().zip(buckets) {
                    let j = column as usize - c0;
                    row[next..j].iter_mut().for_each(|s| *s += far);
                    row[j] += table[usize::from(bucket)];
                    next = j + 1;
                }
                row[next..].iter_mut().for_each(|s| *s += far);
            }
        }
    }

    /// Adds the logit gradients `d_s` of query row `i` (batch `b`) over the block's keys
    /// `j0..j0 + d_s.len()` to their buckets in `banks`.
    #[inline(always)]
    fn add_table_grad(
        &self,
        b: usize,
        i: usize,
        j0: usize,
        dims: &Dims,
        d_s: &[f32],
        banks: &mut TableBanks,
    ) {
        let c0 = self.column_offset + j0;
        match &self.index {
            HostIndex::Dense { bytes, total_k_len } => {
                let start = (b * dims.q_len + i) * total_k_len + c0;
                let buckets = &bytes.as_slice()[start..start + d_s.len()];
                for (j, (&bucket, &ds)) in buckets.iter().zip(d_s).enumerate() {
                    banks[j % TABLE_BANKS][usize::from(bucket)] += ds;
                }
            }
            HostIndex::Sparse(csr) => {
                // the same additions as the dense index would make, in the same order
                let (columns, buckets) = csr.row(b, i, c0..c0 + d_s.len());
                let mut stored = columns.iter().zip(buckets).peekable();
                for (j, &ds) in d_s.iter().enumerate() {
                    let bucket = match stored.peek() {
                        Some(&(&column, &bucket)) if column as usize - c0 == j => {
                            stored.next();
                            usize::from(bucket)
                        }
                        _ => csr.far_bucket,
                    };
                    banks[j % TABLE_BANKS][bucket] += ds;
                }
            }
        }
    }
}

/// A `u8` buffer, borrowed from a contiguous tensor or converted from a wider int dtype.
enum HostBytes {
    Tensor(FlexTensor),
    Owned(Vec<u8>),
}

impl HostBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Tensor(t) => t.as_slice::<u8>().unwrap_or_default(),
            Self::Owned(v) => v,
        }
    }
}

/// The op's inputs as host memory.
struct HostInputs {
    dims: Dims,
    /// `[batch, heads, q_len, head_dim]`, contiguous `f32`.
    q: FlexTensor,
    /// `[batch, heads, k_len, head_dim]`, contiguous `f32`.
    k: FlexTensor,
    v: FlexTensor,
    distance: Option<HostDistance>,
    /// `[batch, heads, q_len, k_len]`, contiguous `f32`.
    dense: Option<FlexTensor>,
    /// `[batch, k_len]`: `0` for a visible key, `-inf` for a masked one.
    mask_add: Option<Vec<f32>>,
    scale: f32,
    /// Keys per tile, see [`clamped_block_size`].
    block_size: usize,
}

/// A contiguous `f32` copy-free view of `tensor`, or `None` for another dtype.
fn contiguous_f32(tensor: &FlexTensor) -> Option<FlexTensor> {
    (tensor.dtype() == DType::F32).then(|| tensor.to_contiguous())
}

/// The float slice of a tensor made by [`contiguous_f32`] (or by this module).
fn floats(tensor: &FlexTensor) -> &[f32] {
    tensor.as_slice::<f32>().unwrap_or_default()
}

/// A new `f32` tensor of `shape` holding `values`.
fn tensor(values: Vec<f32>, shape: Vec<usize>) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

impl HostInputs {
    /// Host views of `inputs`, or `None` when the fused path does not apply (a float dtype other
    /// than `f32`, bucket values beyond `u8`).
    ///
    /// # Panics
    /// If the distance index holds a bucket outside the table (the op's contract leaves such
    /// input undefined; here it is a clear panic, not a wrong result).
    fn new(inputs: &GraphAttentionInputs<Flex>) -> Option<Self> {
        let q = contiguous_f32(&inputs.q)?;
        let k = contiguous_f32(&inputs.k)?;
        let v = contiguous_f32(&inputs.v)?;
        let [batch, heads, q_len, head_dim] = dims4(&q);
        let k_len = dims4(&k)[2];
        let dims = Dims {
            batch,
            heads,
            q_len,
            k_len,
            head_dim,
        };
        let dense = match &inputs.dense {
            Some(dense) => Some(contiguous_f32(dense)?),
            None => None,
        };
        let distance = match &inputs.distance {
            Some(d) => {
                let table = contiguous_f32(&d.table)?;
                let buckets = table.shape()[0];
                let table = floats(&table);
                if buckets > 256 {
                    // a byte index reaches 256 rows at most; the reference handles the rest
                    return None;
                }
                let (index, largest) = match &d.index {
                    BucketIndexPrimitive::Dense(index) => {
                        let bytes = host_bytes(index)?;
                        let largest = bytes.as_slice().iter().copied().max();
                        let total_k_len = index.shape()[2];
                        (HostIndex::Dense { bytes, total_k_len }, largest)
                    }
                    BucketIndexPrimitive::Sparse(index) => {
                        let csr = HostCsr::read::<Flex>(index);
                        let far = u8::try_from(csr.far_bucket).ok()?;
                        let largest = csr.max_bucket().map_or(far, |b| b.max(far));
                        (HostIndex::Sparse(csr), Some(largest))
                    }
                };
                if let Some(worst) = largest
                    && usize::from(worst) >= buckets
                {
                    panic!(
                        "the distance index holds bucket {worst}, but the table has {buckets} rows"
                    );
                }
                let mut table_t = vec![[0.0; 256]; heads];
                for bucket in 0..buckets {
                    for (h, column) in table_t.iter_mut().enumerate() {
                        column[bucket] = table[bucket * heads + h];
                    }
                }
                Some(HostDistance {
                    index,
                    column_offset: d.column_offset,
                    table_t,
                    buckets,
                })
            }
            None => None,
        };
        let mask_add = inputs.key_padding_mask.as_ref().map(|mask| {
            mask.clone()
                .into_data()
                .iter::<bool>()
                .map(|masked| if masked { f32::NEG_INFINITY } else { 0.0 })
                .collect()
        });
        Some(Self {
            dims,
            q,
            k,
            v,
            distance,
            dense,
            mask_add,
            scale: inputs.scale,
            block_size: clamped_block_size(inputs.block_size),
        })
    }

    /// Adds the bias of query row `i` (batch `b`, head `h`) over keys `j0..j0 + row.len()` to
    /// `row`: table entries through the index, the dense bias, `-inf` for masked keys.
    #[inline(always)]
    fn add_bias(&self, b: usize, h: usize, i: usize, j0: usize, row: &mut [f32]) {
        let t = row.len();
        let dims = &self.dims;
        if let Some(d) = &self.distance {
            d.add_bias(b, h, i, j0, dims, row);
        }
        if let Some(dense) = &self.dense {
            let start = ((b * dims.heads + h) * dims.q_len + i) * dims.k_len + j0;
            for (s, x) in row.iter_mut().zip(&floats(dense)[start..start + t]) {
                *s += x;
            }
        }
        if let Some(mask) = &self.mask_add {
            let start = b * dims.k_len + j0;
            for (s, m) in row.iter_mut().zip(&mask[start..start + t]) {
                *s += m;
            }
        }
    }
}

/// The four dimensions of a rank-4 tensor.
fn dims4(tensor: &FlexTensor) -> [usize; 4] {
    let dims = tensor.shape().dims::<4>();
    [dims[0], dims[1], dims[2], dims[3]]
}

/// The index as bytes: borrowed when it is a `u8` tensor, converted when every value fits a
/// byte, `None` otherwise.
fn host_bytes(index: &FlexTensor) -> Option<HostBytes> {
    if index.dtype() == DType::U8 {
        return Some(HostBytes::Tensor(index.to_contiguous()));
    }
    index
        .clone()
        .into_data()
        .iter::<i64>()
        .map(|value| u8::try_from(value).ok())
        .collect::<Option<Vec<u8>>>()
        .map(HostBytes::Owned)
}

/// Key tiles of one (batch, head), transposed and padded for [`tile`]'s products: tile `t` of
/// keys `t·tile..` is a `[head_dim, width]` block, `width` the tile's key count rounded up to
/// [`tile::LANES`].
struct KeyTiles {
    /// `(first key, key count, offset of the block)` per tile.
    tiles: Vec<(usize, usize, usize)>,
    head_dim: usize,
    len: usize,
}

impl KeyTiles {
    /// The tiling of `k_len` keys in tiles of `tile` with `head_dim` rows per block.
    fn new(k_len: usize, tile: usize, head_dim: usize) -> Self {
        let mut tiles = Vec::new();
        let mut offset = 0;
        for j0 in (0..k_len).step_by(tile) {
            let t = tile.min(k_len - j0);
            tiles.push((j0, t, offset));
            offset += head_dim * tile::padded(t);
        }
        Self {
            tiles,
            head_dim,
            len: offset,
        }
    }

    /// Floats of all blocks together.
    fn len(&self) -> usize {
        self.len
    }

    /// `rows [k_len, head_dim]` rearranged into the blocks (padding zero).
    fn transpose(&self, rows: &[f32]) -> Vec<f32> {
        let dh = self.head_dim;
        let mut out = vec![0.0; self.len];
        for &(j0, t, offset) in &self.tiles {
            let width = tile::padded(t);
            for j in 0..t {
                for d in 0..dh {
                    out[offset + d * width + j] = rows[(j0 + j) * dh + d];
                }
            }
        }
        out
    }

    /// The blocks rearranged back into rows `[k_len, head_dim]`, written to `rows`.
    fn untranspose(&self, blocks: &[f32], rows: &mut [f32]) {
        let dh = self.head_dim;
        for &(j0, t, offset) in &self.tiles {
            let width = tile::padded(t);
            for j in 0..t {
                for d in 0..dh {
                    rows[(j0 + j) * dh + d] = blocks[offset + d * width + j];
                }
            }
        }
    }
}

/// One (batch, head) of the inputs, with its key and value tiles transposed for [`tile`]'s
/// products: what every task of the (batch, head) reads.
struct Head<'a> {
    host: &'a HostInputs,
    tiles: &'a KeyTiles,
    /// Transposed key tiles.
    kt: Vec<f32>,
    /// Transposed value tiles.
    vt: Vec<f32>,
    /// Key rows, `[k_len, head_dim]`.
    k_rows: &'a [f32],
    /// Value rows, `[k_len, head_dim]`.
    v_rows: &'a [f32],
    b: usize,
    h: usize,
}

impl<'a> Head<'a> {
    /// The (batch, head) at flat position `bh` of `host`'s inputs, tiled by `tiles`.
    fn new(host: &'a HostInputs, tiles: &'a KeyTiles, bh: usize) -> Self {
        let rows = bh * host.dims.k_len * host.dims.head_dim
            ..(bh + 1) * host.dims.k_len * host.dims.head_dim;
        let k_rows = &floats(&host.k)[rows.clone()];
        let v_rows = &floats(&host.v)[rows];
        Self {
            host,
            tiles,
            kt: tiles.transpose(k_rows),
            vt: tiles.transpose(v_rows),
            k_rows,
            v_rows,
            b: bh / host.dims.heads,
            h: bh % host.dims.heads,
        }
    }
}

impl crate::GraphAttentionBackend for Flex {
    fn graph_attention_forward(
        inputs: GraphAttentionInputs<Self>,
    ) -> burn::tensor::ops::FloatTensor<Self> {
        // f16 / bf16 inputs: converted to f32 copies here, so that they take the fused path
        let (inputs, _) = widen_inputs(inputs);
        match HostInputs::new(&inputs) {
            Some(host) => forward(&host),
            None => crate::reference::forward(inputs),
        }
    }

    fn graph_attention_backward(
        inputs: GraphAttentionInputs<Self>,
        packed_output: burn::tensor::ops::FloatTensor<Self>,
        packed_grad: burn::tensor::ops::FloatTensor<Self>,
    ) -> crate::GraphAttentionGrads<Self> {
        let (inputs, dtypes) = widen_inputs(inputs);
        let packed_output = widen::<Self>(packed_output);
        let packed_grad = widen::<Self>(packed_grad);
        let packed = (contiguous_f32(&packed_output), contiguous_f32(&packed_grad));
        let grads = match (HostInputs::new(&inputs), packed) {
            (Some(host), (Some(output), Some(grad))) => backward(&host, &output, &grad),
            _ => crate::reference::backward(inputs, packed_output, packed_grad),
        };
        narrow_grads(grads, dtypes)
    }

    fn sparse_edge_attention_forward(inputs: SparseEdgeInputs<Self>) -> SparseEdgeOutput<Self> {
        sparse_edge::forward(inputs)
    }

    fn sparse_edge_attention_backward(
        inputs: SparseEdgeInputs<Self>,
        output: SparseEdgeOutput<Self>,
        grad: burn::tensor::ops::FloatTensor<Self>,
    ) -> SparseEdgeGrads<Self> {
        sparse_edge::backward(inputs, output, grad)
    }
}

//! What the kernels share: their common arguments ([`Inputs`], [`Tiling`]), the position of a
//! cube, and the `#[cube]` helpers that stage tiles in shared memory and work on rows.
//!
//! Every kernel runs one cube per `(tile, head, batch)` (`CUBE_POS_X`, `CUBE_POS_Y`,
//! `CUBE_POS_Z`) with one unit per row of its tile (`units` rows: query rows for the forward pass
//! and the query backward pass, keys for the key backward pass), and walks the other side in
//! tiles of `walk` rows staged in shared memory.
//!
//! Tensors are read through their strides, so permuted inputs need no copy. Absent optional
//! inputs are 1-element placeholders whose reads are compiled out by the `has_*` comptime flags.
//! Offsets are `usize`, which the launch code compiles to 64-bit integers when a tensor's
//! elements reach past `u32::MAX` (`address_type = "dynamic"`, see `super::address_type`).
//! `head_dim` is comptime: 8, 16, 32, 64 and 128 get fully unrolled channel loops, other sizes a
//! plain loop.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// The inputs of the op, common to the tiled kernels.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Inputs<F: Float, I: Numeric> {
    /// `[batch, heads, q_len, head_dim]`
    pub q: Tensor<F>,
    /// `[batch, heads, k_len, head_dim]`
    pub k: Tensor<F>,
    /// `[batch, heads, k_len, head_dim]`
    pub v: Tensor<F>,
    /// `[batch, q_len, total_k_len]` buckets (a placeholder without a distance bias).
    pub index: Tensor<I>,
    /// `[buckets, heads]`
    pub table: Tensor<F>,
    /// `[batch, heads, q_len, k_len]`
    pub dense: Tensor<F>,
    /// `[batch, k_len]`, `1` for a masked key.
    pub mask: Tensor<F>,
    /// Factor of `q·kᵀ`.
    pub scale: f32,
    /// Column of the index of key `0`.
    pub column_offset: usize,
}

/// The comptime shape of a launch: tile sizes, channels, buckets and which inputs are present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tiling {
    /// Channels per head.
    pub head_dim: usize,
    /// Rows (and units) per cube.
    pub units: usize,
    /// Rows per tile of the walked side.
    pub walk: usize,
    /// Rows of the table (at least one, for the shared-memory sizes).
    pub buckets: usize,
    pub has_distance: bool,
    pub has_dense: bool,
    pub has_mask: bool,
}

/// Whether the channel loops of `head_dim` are unrolled (the specialized sizes).
pub(crate) fn unrolled(head_dim: usize) -> bool {
    matches!(head_dim, 8 | 16 | 32 | 64 | 128)
}

/// Number of tiles of `tile` rows covering `len` rows.
#[cube]
pub(crate) fn tile_count(len: usize, #[comptime] tile: usize) -> usize {
    len.div_ceil(tile)
}

/// Where a unit works: its cube's `(tile, head, batch)` and its row of the tile.
#[derive(CubeType)]
pub(crate) struct Position {
    /// Batch element.
    pub b: usize,
    /// Head.
    pub h: usize,
    /// First row of the cube's tile.
    pub first: usize,
    /// The unit's index in the cube.
    pub unit: usize,
    /// The unit's row, `first + unit`.
    pub row: usize,
}

/// The `(batch element, head)` whose rows a cube reads.
#[derive(CubeType)]
pub(crate) struct HeadAt {
    /// Batch element of the inputs.
    pub b: usize,
    /// Head.
    pub h: usize,
}

/// The position of this unit in tiles of `units` rows.
#[cube]
pub(crate) fn position(#[comptime] units: usize) -> Position {
    let first = CUBE_POS_X as usize * units;
    let unit = UNIT_POS as usize;
    Position {
        b: CUBE_POS_Z as usize,
        h: CUBE_POS_Y as usize,
        first,
        unit,
        row: first + unit,
    }
}

/// Offset of `(b, h, i, 0)` in a `[batch, heads, rows, channels]` tensor (of `(b, h, i)` in a
/// `[batch, heads, rows]` one).
#[cube]
pub(crate) fn row_offset<F: CubePrimitive>(t: &Tensor<F>, b: usize, h: usize, i: usize) -> usize {
    b * t.stride(0) + h * t.stride(1) + i * t.stride(2)
}

/// Copies rows `start..start + rows` (channels `0..head_dim`) of `t` at `head` into `tile`
/// (`[rows, head_dim]`), cooperatively and coalesced along the channels; rows past `len` are
/// zeros.
#[cube]
pub(crate) fn load_rows<F: Float>(
    t: &Tensor<F>,
    head: &HeadAt,
    start: usize,
    len: usize,
    tile: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] tiling: Tiling,
) {
    let (head_dim, units) = comptime![(tiling.head_dim, tiling.units)];
    let base = row_offset::<F>(t, head.b, head.h, 0);
    let mut e = UNIT_POS as usize;
    while e < rows * head_dim {
        let r = e / head_dim;
        let c = e % head_dim;
        let mut value = F::new(0.0);
        if start + r < len {
            value = t[base + (start + r) * t.stride(2) + c * t.stride(3)];
        }
        tile[e] = value;
        e += units;
    }
}

/// Copies channel `channel` of rows `start..start + rows` of `t` at `head` into `out` (zeros past
/// `len`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_column<F: Float>(
    t: &Tensor<F>,
    head: &HeadAt,
    start: usize,
    len: usize,
    channel: usize,
    out: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] units: usize,
) {
    let base = row_offset::<F>(t, head.b, head.h, 0) + channel * t.stride(3);
    let mut r = UNIT_POS as usize;
    while r < rows {
        let mut value = F::new(0.0);
        if start + r < len {
            value = t[base + (start + r) * t.stride(2)];
        }
        out[r] = value;
        r += units;
    }
}

/// Visibility (`1` visible, `0` masked or past `k_len`) of keys `start..start + keys` of batch
/// element `b` into `out`.
#[cube]
// nested: the mask read must stay inside the comptime `has_mask` branch
#[allow(clippy::collapsible_if)]
pub(crate) fn load_visible<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    b: usize,
    start: usize,
    out: &mut SharedMemory<F>,
    #[comptime] keys: usize,
    #[comptime] tiling: Tiling,
) {
    let k_len = inputs.k.shape(2);
    let mut c = UNIT_POS as usize;
    while c < keys {
        let j = start + c;
        let mut visible = F::new(0.0);
        if j < k_len {
            visible = F::new(1.0);
            if comptime![tiling.has_mask] {
                let mask = &inputs.mask;
                if mask[b * mask.stride(0) + j * mask.stride(1)] >= F::new(0.5) {
                    visible = F::new(0.0);
                }
            }
        }
        out[c] = visible;
        c += comptime![tiling.units];
    }
}

/// The head's column of the table (`[buckets, heads]`) in shared memory.
#[cube]
pub(crate) fn load_table<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    h: usize,
    #[comptime] tiling: Tiling,
) -> SharedMemory<F> {
    let mut out = SharedMemory::<F>::new(comptime![tiling.buckets]);
    if comptime![tiling.has_distance] {
        let table = &inputs.table;
        let mut e = UNIT_POS as usize;
        while e < comptime![tiling.buckets] {
            out[e] = table[e * table.stride(0) + h * table.stride(1)];
            e += comptime![tiling.units];
        }
    }
    out
}

/// The bias block of query rows `i0..i0 + rows` × keys `j0..j0 + cols` at `head` into `bias`
/// (`[rows, cols]`, zeros outside `q_len × k_len`): the index read coalesced along the keys and
/// looked up in the head's table `table_tile`, plus the dense bias. With `keep_buckets`, the
/// buckets go to `bucket_tile` as well.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_bias<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    table_tile: &SharedMemory<F>,
    head: &HeadAt,
    i0: usize,
    j0: usize,
    bias: &mut SharedMemory<F>,
    bucket_tile: &mut SharedMemory<u32>,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] keep_buckets: bool,
    #[comptime] tiling: Tiling,
) {
    let index = &inputs.index;
    let dense = &inputs.dense;
    let q_len = inputs.q.shape(2);
    let k_len = inputs.k.shape(2);
    let index_base = head.b * index.stride(0) + (inputs.column_offset + j0) * index.stride(2);
    let dense_base = row_offset::<F>(dense, head.b, head.h, i0) + j0 * dense.stride(3);
    let mut e = UNIT_POS as usize;
    while e < rows * cols {
        let r = e / cols;
        let c = e % cols;
        let mut value = F::new(0.0);
        let mut bucket = 0u32;
        if i0 + r < q_len && j0 + c < k_len {
            if comptime![tiling.has_distance] {
                bucket = u32::cast_from(
                    index[index_base + (i0 + r) * index.stride(1) + c * index.stride(2)],
                );
                value += table_tile[bucket as usize];
            }
            if comptime![tiling.has_dense] {
                value += dense[dense_base + r * dense.stride(2) + c * dense.stride(3)];
            }
        }
        bias[e] = value;
        if keep_buckets {
            bucket_tile[e] = bucket;
        }
        e += comptime![tiling.units];
    }
}

/// The shared memory of a cube of query rows walking the key tiles (the forward pass and the
/// query backward pass): the head's table and, per key tile, `K` and `V` rows, key visibility
/// and the `(query tile × key tile)` bias block.
#[derive(CubeType)]
pub(crate) struct KeyTile<F: Float> {
    /// `[walk, head_dim]`
    pub k: SharedMemory<F>,
    /// `[walk, head_dim]`
    pub v: SharedMemory<F>,
    /// `[walk]`, `1` for a visible key.
    pub visible: SharedMemory<F>,
    /// `[units, walk]`
    pub bias: SharedMemory<F>,
    /// `[buckets]`, the head's table column.
    pub table: SharedMemory<F>,
}

/// The key-tile memory of head `h`, with the table loaded.
#[cube]
pub(crate) fn alloc_key_tile<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    h: usize,
    #[comptime] tiling: Tiling,
) -> KeyTile<F> {
    let walk = comptime![tiling.walk];
    KeyTile::<F> {
        k: SharedMemory::<F>::new(walk * comptime![tiling.head_dim]),
        v: SharedMemory::<F>::new(walk * comptime![tiling.head_dim]),
        visible: SharedMemory::<F>::new(walk),
        bias: SharedMemory::<F>::new(comptime![tiling.units] * walk),
        table: load_table::<F, I>(inputs, h, tiling),
    }
}

/// Loads the key tile `j0..j0 + walk` for the query rows `i0..i0 + units` at `head`, between
/// two cube barriers (the first lets the previous tile's readers finish).
#[cube]
pub(crate) fn load_key_tile<F: Float, I: Numeric>(
    inputs: &Inputs<F, I>,
    tile: &mut KeyTile<F>,
    head: &HeadAt,
    i0: usize,
    j0: usize,
    #[comptime] tiling: Tiling,
) {
    let (units, walk) = comptime![(tiling.units, tiling.walk)];
    let k_len = inputs.k.shape(2);
    let mut no_buckets = SharedMemory::<u32>::new(1usize);
    sync_cube();
    load_rows::<F>(&inputs.k, head, j0, k_len, &mut tile.k, walk, tiling);
    load_rows::<F>(&inputs.v, head, j0, k_len, &mut tile.v, walk, tiling);
    load_visible::<F, I>(inputs, head.b, j0, &mut tile.visible, walk, tiling);
    load_bias::<F, I>(
        inputs,
        &tile.table,
        head,
        i0,
        j0,
        &mut tile.bias,
        &mut no_buckets,
        units,
        walk,
        false,
        tiling,
    );
    sync_cube();
}

/// `Σ_c a[c] · tile[at + c]` over `head_dim` channels.
#[cube]
pub(crate) fn dot_tile<F: Float>(
    a: &Array<F>,
    tile: &SharedMemory<F>,
    at: usize,
    #[comptime] head_dim: usize,
) -> F {
    let mut sum = F::new(0.0);
    #[unroll(unrolled(head_dim))]
    for c in 0..head_dim {
        sum += a[c] * tile[at + c];
    }
    sum
}

/// `acc[c] += w · tile[at + c]` over `head_dim` channels.
#[cube]
pub(crate) fn axpy_tile<F: Float>(
    acc: &mut Array<F>,
    w: F,
    tile: &SharedMemory<F>,
    at: usize,
    #[comptime] head_dim: usize,
) {
    #[unroll(unrolled(head_dim))]
    for c in 0..head_dim {
        acc[c] += w * tile[at + c];
    }
}

/// Channels `0..head_dim` of row `(b, h, i)` of `t` times `factor` (zeros when `!valid`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_row<F: Float>(
    t: &Tensor<F>,
    b: usize,
    h: usize,
    i: usize,
    valid: bool,
    factor: F,
    #[comptime] head_dim: usize,
) -> Array<F> {
    let mut row = Array::<F>::new(head_dim);
    let at = row_offset::<F>(t, b, h, i);
    #[unroll(unrolled(head_dim))]
    for c in 0..head_dim {
        let mut value = F::new(0.0);
        if valid {
            value = t[at + c * t.stride(3)] * factor;
        }
        row[c] = value;
    }
    row
}

/// Zeros over `head_dim` channels.
#[cube]
pub(crate) fn zeros<F: Float>(#[comptime] head_dim: usize) -> Array<F> {
    let mut row = Array::<F>::new(head_dim);
    #[unroll(unrolled(head_dim))]
    for c in 0..head_dim {
        row[c] = F::new(0.0);
    }
    row
}

/// Writes `row · factor` to channels `0..head_dim` of `(b, h, i)` of `t`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_row<F: Float>(
    t: &mut Tensor<F>,
    b: usize,
    h: usize,
    i: usize,
    row: &Array<F>,
    factor: F,
    #[comptime] head_dim: usize,
) {
    let at = row_offset::<F>(t, b, h, i);
    #[unroll(unrolled(head_dim))]
    for c in 0..head_dim {
        t[at + c * t.stride(3)] = row[c] * factor;
    }
}

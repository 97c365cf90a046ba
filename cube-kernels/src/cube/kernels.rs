//! CubeCL kernels of the op, FlashAttention-2 style.
//!
//! Every kernel runs one cube per `(tile, head, batch)` (`CUBE_POS_X`, `CUBE_POS_Y`,
//! `CUBE_POS_Z`) with one unit per row of its tile (`units` rows: query rows for the forward pass
//! and the query backward pass, keys for the key backward pass), and walks the other side in
//! tiles of `walk` rows staged in shared memory:
//!
//! - [`forward_kernel`]: per key tile, `K` and `V` rows, the key mask, and the
//!   `(query tile × key tile)` block of the bias (the `u8` index read coalesced and looked up in
//!   the head's table, itself in shared memory, plus the dense bias) go to shared memory; each
//!   unit computes its row's logits of the tile, then the online softmax with one `exp` per
//!   logit and one rescale per tile, and accumulates `P·V` in registers.
//! - [`shift_kernel`]: `rowsum(dO∘O) − dLSE` per row (FlashAttention-2's `D`, shifted by the
//!   log-sum-exp gradient).
//! - [`key_backward_kernel`]: one unit per key, walking the query tiles (`Q`, `dO`, lse, shift
//!   and the bias block in shared memory), `dK` and `dV` in registers; the table gradient goes
//!   to a per-unit histogram over the buckets, reduced across the cube in shared memory and
//!   written as the cube's partial sums `[batch · key_tiles, buckets, heads]` (no float atomics,
//!   which WGSL lacks; summed afterwards with tensor ops).
//! - [`query_backward_kernel`]: one unit per query row walking the key tiles, `dQ` in registers;
//!   the dense-bias gradient block is staged in shared memory and written coalesced.
//!
//! Tensors are read through their strides, so permuted inputs need no copy. Absent optional
//! inputs are 1-element placeholders whose reads are compiled out by the `has_*` comptime flags.
//! No infinity is ever produced by arithmetic (WGSL may assume finite math): masked keys are
//! skipped, the running max starts at the first visible logit, and the `-inf` log-sum-exp of
//! rows without a visible key is a runtime scalar argument that is only stored.
//!
//! Offsets are `usize`, which the launch code compiles to 64-bit integers when a tensor's
//! elements reach past `u32::MAX` (`address_type = "dynamic"`, see `super::address_type`).
//! `head_dim` is comptime: 8, 16, 32, 64 and 128 get fully unrolled channel loops, other sizes a
//! plain loop.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Whether the channel loops of `head_dim` are unrolled (the specialized sizes).
fn unrolled(head_dim: usize) -> bool {
    matches!(head_dim, 8 | 16 | 32 | 64 | 128)
}

/// Number of tiles of `tile` rows covering `len` rows.
#[cube]
fn tile_count(len: usize, #[comptime] tile: usize) -> usize {
    len.div_ceil(tile)
}

/// Offset of `(b, h, i, 0)` in a `[batch, heads, rows, channels]` tensor.
#[cube]
fn row_offset<F: CubePrimitive>(t: &Tensor<F>, b: usize, h: usize, i: usize) -> usize {
    b * t.stride(0) + h * t.stride(1) + i * t.stride(2)
}

/// Copies rows `start..start + rows` (channels `0..head_dim`) of `(b, h)` of `t` into `tile`
/// (`[rows, head_dim]`), cooperatively and coalesced along the channels; rows past `len` are
/// zeros. With `scale_by`, the values are multiplied by `factor`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_rows<F: Float>(
    t: &Tensor<F>,
    b: usize,
    h: usize,
    start: usize,
    len: usize,
    tile: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
) {
    let base = row_offset::<F>(t, b, h, 0);
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

/// Copies channel `channel` of rows `start..start + rows` of `(b, h)` of `t` into `out`
/// (zeros past `len`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_column<F: Float>(
    t: &Tensor<F>,
    b: usize,
    h: usize,
    start: usize,
    len: usize,
    channel: usize,
    out: &mut SharedMemory<F>,
    #[comptime] rows: usize,
    #[comptime] units: usize,
) {
    let base = row_offset::<F>(t, b, h, 0) + channel * t.stride(3);
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
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
fn load_visible<F: Float>(
    mask: &Tensor<F>,
    b: usize,
    start: usize,
    k_len: usize,
    out: &mut SharedMemory<F>,
    #[comptime] keys: usize,
    #[comptime] units: usize,
    #[comptime] has_mask: bool,
) {
    let mut c = UNIT_POS as usize;
    while c < keys {
        let j = start + c;
        let mut visible = F::new(0.0);
        if j < k_len {
            visible = F::new(1.0);
            if has_mask {
                if mask[b * mask.stride(0) + j * mask.stride(1)] >= F::new(0.5) {
                    visible = F::new(0.0);
                }
            }
        }
        out[c] = visible;
        c += units;
    }
}

/// The head's column of the table (`[buckets, heads]`) into `out`.
#[cube]
fn load_table<F: Float>(
    table: &Tensor<F>,
    h: usize,
    out: &mut SharedMemory<F>,
    #[comptime] buckets: usize,
    #[comptime] units: usize,
    #[comptime] has_distance: bool,
) {
    if has_distance {
        let mut e = UNIT_POS as usize;
        while e < buckets {
            out[e] = table[e * table.stride(0) + h * table.stride(1)];
            e += units;
        }
    }
}

/// The bias block of query rows `i0..i0 + rows` × keys `j0..j0 + cols` into `bias`
/// (`[rows, cols]`, zeros outside `q_len × k_len`): the index read coalesced along the keys and
/// looked up in the head's table `table_tile`, plus the dense bias. With `keep_buckets`, the
/// buckets go to `bucket_tile` as well.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_bias<F: Float, I: Numeric>(
    index: &Tensor<I>,
    table_tile: &SharedMemory<F>,
    dense: &Tensor<F>,
    b: usize,
    h: usize,
    i0: usize,
    q_len: usize,
    j0: usize,
    k_len: usize,
    column_offset: usize,
    bias: &mut SharedMemory<F>,
    bucket_tile: &mut SharedMemory<u32>,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] units: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] keep_buckets: bool,
) {
    let index_base = b * index.stride(0) + (column_offset + j0) * index.stride(2);
    let dense_base = row_offset::<F>(dense, b, h, i0) + j0 * dense.stride(3);
    let mut e = UNIT_POS as usize;
    while e < rows * cols {
        let r = e / cols;
        let c = e % cols;
        let mut value = F::new(0.0);
        let mut bucket = 0u32;
        if i0 + r < q_len && j0 + c < k_len {
            if has_distance {
                bucket = u32::cast_from(index[index_base + (i0 + r) * index.stride(1) + c * index.stride(2)]);
                value += table_tile[bucket as usize];
            }
            if has_dense {
                value += dense[dense_base + r * dense.stride(2) + c * dense.stride(3)];
            }
        }
        bias[e] = value;
        if keep_buckets {
            bucket_tile[e] = bucket;
        }
        e += units;
    }
}

/// The key tile `j0..j0 + walk` of the forward pass and the query backward pass (cube of query
/// rows `i0..i0 + units`): `K` and `V` rows, key visibility and the bias block, between two
/// cube barriers (the first lets the previous tile's readers finish).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_key_tile<F: Float, I: Numeric>(
    k: &Tensor<F>,
    v: &Tensor<F>,
    index: &Tensor<I>,
    table_tile: &SharedMemory<F>,
    dense: &Tensor<F>,
    mask: &Tensor<F>,
    b: usize,
    h: usize,
    i0: usize,
    q_len: usize,
    j0: usize,
    column_offset: usize,
    k_tile: &mut SharedMemory<F>,
    v_tile: &mut SharedMemory<F>,
    visible: &mut SharedMemory<F>,
    bias: &mut SharedMemory<F>,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
    #[comptime] walk: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
) {
    let k_len = k.shape(2);
    let mut no_buckets = SharedMemory::<u32>::new(1usize);
    sync_cube();
    load_rows::<F>(k, b, h, j0, k_len, k_tile, walk, head_dim, units);
    load_rows::<F>(v, b, h, j0, k_len, v_tile, walk, head_dim, units);
    load_visible::<F>(mask, b, j0, k_len, visible, walk, units, has_mask);
    load_bias::<F, I>(
        index,
        table_tile,
        dense,
        b,
        h,
        i0,
        q_len,
        j0,
        k_len,
        column_offset,
        bias,
        &mut no_buckets,
        units,
        walk,
        units,
        has_distance,
        has_dense,
        false,
    );
    sync_cube();
}

/// `Σ_c a[c] · tile[at + c]` over `head_dim` channels.
#[cube]
fn dot_tile<F: Float>(
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
fn axpy_tile<F: Float>(
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
fn read_row<F: Float>(
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
fn zeros<F: Float>(#[comptime] head_dim: usize) -> Array<F> {
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
fn write_row<F: Float>(
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

/// Forward pass, one cube per (query tile, head, batch) and one unit per query row; writes the
/// packed `[batch, heads, q_len, head_dim + 1]` result (output, then log-sum-exp).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    index: &Tensor<I>,
    table: &Tensor<F>,
    dense: &Tensor<F>,
    mask: &Tensor<F>,
    packed: &mut Tensor<F>,
    scale: f32,
    column_offset: usize,
    neg_inf: f32,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
    #[comptime] walk: usize,
    #[comptime] buckets: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let b = CUBE_POS_Z as usize;
    let h = CUBE_POS_Y as usize;
    let i0 = CUBE_POS_X as usize * units;
    let u = UNIT_POS as usize;
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    let i = i0 + u;
    let row_ok = i < q_len;

    let mut k_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut v_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut bias = SharedMemory::<F>::new(units * walk);
    let mut visible = SharedMemory::<F>::new(walk);
    let mut table_tile = SharedMemory::<F>::new(buckets);
    load_table::<F>(table, h, &mut table_tile, buckets, units, has_distance);

    let q_row = read_row::<F>(q, b, h, i, row_ok, F::cast_from(scale), head_dim);
    let mut acc = zeros::<F>(head_dim);
    let mut logits = Array::<F>::new(walk);
    let mut max = F::new(0.0);
    let mut sum = F::new(0.0);
    let mut seen = false;

    for t in 0..tile_count(k_len, walk) {
        let j0 = t * walk;
        load_key_tile::<F, I>(
            k,
            v,
            index,
            &table_tile,
            dense,
            mask,
            b,
            h,
            i0,
            q_len,
            j0,
            column_offset,
            &mut k_tile,
            &mut v_tile,
            &mut visible,
            &mut bias,
            head_dim,
            units,
            walk,
            has_distance,
            has_dense,
            has_mask,
        );
        if row_ok {
            let mut tile_max = F::new(0.0);
            let mut any = false;
            for c in 0..walk {
                if visible[c] > F::new(0.5) {
                    let s = dot_tile::<F>(&q_row, &k_tile, c * head_dim, head_dim) + bias[u * walk + c];
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
                    if visible[c] > F::new(0.5) {
                        let p = (logits[c] - max).exp();
                        sum += p;
                        axpy_tile::<F>(&mut acc, p, &v_tile, c * head_dim, head_dim);
                    }
                }
            }
        }
    }

    if row_ok {
        let at = row_offset::<F>(packed, b, h, i);
        let step = packed.stride(3);
        if seen {
            write_row::<F>(packed, b, h, i, &acc, F::new(1.0) / sum, head_dim);
            packed[at + head_dim * step] = max + sum.ln();
        } else {
            write_row::<F>(packed, b, h, i, &acc, F::new(0.0), head_dim);
            packed[at + head_dim * step] = F::cast_from(neg_inf);
        }
    }
}

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
    let b = CUBE_POS_Z as usize;
    let h = CUBE_POS_Y as usize;
    let i = CUBE_POS_X as usize * units + UNIT_POS as usize;
    if i < packed.shape(2) {
        let o = read_row::<F>(packed, b, h, i, true, F::new(1.0), head_dim);
        let g_at = row_offset::<F>(packed_grad, b, h, i);
        let g_step = packed_grad.stride(3);
        let mut delta = F::new(0.0);
        #[unroll(unrolled(head_dim))]
        for c in 0..head_dim {
            delta += o[c] * packed_grad[g_at + c * g_step];
        }
        shift[b * shift.stride(0) + h * shift.stride(1) + i * shift.stride(2)] =
            delta - packed_grad[g_at + head_dim * g_step];
    }
}

/// Backward pass for the keys and values, one cube per (key tile, head, batch) and one unit per
/// key, walking the query tiles; writes `dk`, `dv` and the cube's table-gradient partial sums
/// `table_partial [batch · key_tiles, buckets, heads]`.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn key_backward_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    index: &Tensor<I>,
    table: &Tensor<F>,
    dense: &Tensor<F>,
    mask: &Tensor<F>,
    packed: &Tensor<F>,
    packed_grad: &Tensor<F>,
    shift: &Tensor<F>,
    d_k: &mut Tensor<F>,
    d_v: &mut Tensor<F>,
    table_partial: &mut Tensor<F>,
    scale: f32,
    column_offset: usize,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
    #[comptime] walk: usize,
    #[comptime] buckets: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let b = CUBE_POS_Z as usize;
    let h = CUBE_POS_Y as usize;
    let tile = CUBE_POS_X as usize;
    let j0 = tile * units;
    let u = UNIT_POS as usize;
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    let j = j0 + u;
    let scale = F::cast_from(scale);

    let mut q_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut g_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut lse = SharedMemory::<F>::new(walk);
    let mut row_shift = SharedMemory::<F>::new(walk);
    let mut bias = SharedMemory::<F>::new(walk * units);
    let mut bucket_tile = SharedMemory::<u32>::new(walk * units);
    let mut table_tile = SharedMemory::<F>::new(buckets);
    let mut visible = SharedMemory::<F>::new(units);
    load_table::<F>(table, h, &mut table_tile, buckets, units, has_distance);
    load_visible::<F>(mask, b, j0, k_len, &mut visible, units, units, has_mask);
    sync_cube();
    let key_ok = visible[u] > F::new(0.5);

    let k_row = read_row::<F>(k, b, h, j, key_ok, scale, head_dim);
    let v_row = read_row::<F>(v, b, h, j, key_ok, F::new(1.0), head_dim);
    let mut acc_k = zeros::<F>(head_dim);
    let mut acc_v = zeros::<F>(head_dim);
    let mut histogram = Array::<F>::new(buckets);
    for e in 0..buckets {
        histogram[e] = F::new(0.0);
    }

    for t in 0..tile_count(q_len, walk) {
        let i0 = t * walk;
        sync_cube();
        load_rows::<F>(q, b, h, i0, q_len, &mut q_tile, walk, head_dim, units);
        load_rows::<F>(packed_grad, b, h, i0, q_len, &mut g_tile, walk, head_dim, units);
        load_column::<F>(packed, b, h, i0, q_len, head_dim, &mut lse, walk, units);
        load_column::<F>(shift, b, h, i0, q_len, 0, &mut row_shift, walk, units);
        load_bias::<F, I>(
            index,
            &table_tile,
            dense,
            b,
            h,
            i0,
            q_len,
            j0,
            k_len,
            column_offset,
            &mut bias,
            &mut bucket_tile,
            walk,
            units,
            units,
            has_distance,
            has_dense,
            has_distance,
        );
        sync_cube();
        // a visible key is visible to every query row of its batch element, whose lse is finite
        if key_ok {
            let mut rows = q_len - i0;
            if rows > walk {
                rows = walk;
            }
            for r in 0..rows {
                let s = dot_tile::<F>(&k_row, &q_tile, r * head_dim, head_dim) + bias[r * units + u];
                let p = (s - lse[r]).exp();
                let d_p = dot_tile::<F>(&v_row, &g_tile, r * head_dim, head_dim);
                let d_s = p * (d_p - row_shift[r]);
                axpy_tile::<F>(&mut acc_v, p, &g_tile, r * head_dim, head_dim);
                axpy_tile::<F>(&mut acc_k, d_s, &q_tile, r * head_dim, head_dim);
                if has_distance {
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

    if has_distance {
        // the units' histograms summed per bucket, `units` buckets at a time through `bias`
        // (`walk * units >= units * units` floats is not guaranteed: use a dedicated tile)
        let mut lanes = SharedMemory::<F>::new(units * units);
        let cube = b * tile_count(k_len, units) + tile;
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

/// Backward pass for the queries, one cube per (query tile, head, batch) and one unit per query
/// row, walking the key tiles; writes `dq` and, with a dense bias, its gradient
/// `d_dense [batch, heads, q_len, k_len]`.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn query_backward_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    index: &Tensor<I>,
    table: &Tensor<F>,
    dense: &Tensor<F>,
    mask: &Tensor<F>,
    packed: &Tensor<F>,
    packed_grad: &Tensor<F>,
    shift: &Tensor<F>,
    d_q: &mut Tensor<F>,
    d_dense: &mut Tensor<F>,
    scale: f32,
    column_offset: usize,
    #[comptime] head_dim: usize,
    #[comptime] units: usize,
    #[comptime] walk: usize,
    #[comptime] buckets: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let b = CUBE_POS_Z as usize;
    let h = CUBE_POS_Y as usize;
    let i0 = CUBE_POS_X as usize * units;
    let u = UNIT_POS as usize;
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    let i = i0 + u;
    let row_ok = i < q_len;
    let scale = F::cast_from(scale);

    let mut k_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut v_tile = SharedMemory::<F>::new(walk * head_dim);
    let mut bias = SharedMemory::<F>::new(units * walk);
    let mut d_s_tile = SharedMemory::<F>::new(units * walk);
    let mut visible = SharedMemory::<F>::new(walk);
    let mut table_tile = SharedMemory::<F>::new(buckets);
    load_table::<F>(table, h, &mut table_tile, buckets, units, has_distance);

    let q_row = read_row::<F>(q, b, h, i, row_ok, scale, head_dim);
    let g_row = read_row::<F>(packed_grad, b, h, i, row_ok, F::new(1.0), head_dim);
    let mut lse = F::new(0.0);
    let mut row_shift = F::new(0.0);
    if row_ok {
        lse = packed[row_offset::<F>(packed, b, h, i) + head_dim * packed.stride(3)];
        row_shift = shift[b * shift.stride(0) + h * shift.stride(1) + i * shift.stride(2)];
    }
    let mut acc = zeros::<F>(head_dim);

    for t in 0..tile_count(k_len, walk) {
        let j0 = t * walk;
        load_key_tile::<F, I>(
            k,
            v,
            index,
            &table_tile,
            dense,
            mask,
            b,
            h,
            i0,
            q_len,
            j0,
            column_offset,
            &mut k_tile,
            &mut v_tile,
            &mut visible,
            &mut bias,
            head_dim,
            units,
            walk,
            has_distance,
            has_dense,
            has_mask,
        );
        if row_ok {
            for c in 0..walk {
                let mut d_s = F::new(0.0);
                if visible[c] > F::new(0.5) {
                    let s = dot_tile::<F>(&q_row, &k_tile, c * head_dim, head_dim) + bias[u * walk + c];
                    let p = (s - lse).exp();
                    let d_p = dot_tile::<F>(&g_row, &v_tile, c * head_dim, head_dim);
                    d_s = p * (d_p - row_shift);
                    axpy_tile::<F>(&mut acc, d_s, &k_tile, c * head_dim, head_dim);
                }
                if has_dense {
                    d_s_tile[u * walk + c] = d_s;
                }
            }
        }
        if has_dense {
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

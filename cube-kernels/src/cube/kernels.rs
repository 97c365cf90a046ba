//! CubeCL kernels of the op: one unit per query row (forward, backward for queries) or per key
//! (backward for keys and values), each looping over the other side with the same online softmax
//! and the same recomputation as the reference implementation.
//!
//! Tensors are read through their strides, so permuted inputs need no copy. Absent optional
//! inputs are 1-element placeholders whose reads are compiled out by the `has_*` comptime flags.
//! No infinity is ever produced by arithmetic (WGSL may assume finite math): masked keys are
//! skipped, the running max starts at the first visible logit, and the `-inf` log-sum-exp of
//! rows without a visible key is a runtime scalar argument that is only stored.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Coordinates `(b, h, i)` of row `row` of a `[batch, heads, n, _]` tensor.
#[cube]
fn split_row(row: usize, heads: usize, n: usize) -> (usize, usize, usize) {
    let i = row % n;
    let bh = row / n;
    (bh / heads, bh % heads, i)
}

/// Whether key `j` of batch `b` is visible (mask as float, `1` = masked).
#[cube]
fn key_visible<F: Float>(mask: &Tensor<F>, b: usize, j: usize, #[comptime] has_mask: bool) -> bool {
    let mut visible = true;
    if has_mask {
        visible = mask[b * mask.stride(0) + j * mask.stride(1)] < F::new(0.5);
    }
    visible
}

/// Bias of logit `(b, h, i, j)`: distance table through the index plus dense bias.
#[cube]
#[allow(clippy::too_many_arguments)]
fn bias_at<F: Float, I: Numeric>(
    index: &Tensor<I>,
    table: &Tensor<F>,
    dense: &Tensor<F>,
    b: usize,
    h: usize,
    i: usize,
    j: usize,
    column_offset: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
) -> F {
    let mut bias = F::new(0.0);
    if has_distance {
        let at = b * index.stride(0) + i * index.stride(1) + (column_offset + j) * index.stride(2);
        let bucket = usize::cast_from(index[at]);
        bias += table[bucket * table.stride(0) + h * table.stride(1)];
    }
    if has_dense {
        bias += dense
            [b * dense.stride(0) + h * dense.stride(1) + i * dense.stride(2) + j * dense.stride(3)];
    }
    bias
}

/// `Σ_c a[a_at + c·a_step] · b[b_at + c·b_step]` over `head_dim` channels.
#[cube]
fn dot<F: Float>(
    a: &Tensor<F>,
    a_at: usize,
    a_step: usize,
    b: &Tensor<F>,
    b_at: usize,
    b_step: usize,
    #[comptime] head_dim: usize,
) -> F {
    let mut sum = F::new(0.0);
    #[unroll]
    for c in 0..head_dim {
        sum += a[a_at + c * a_step] * b[b_at + c * b_step];
    }
    sum
}

/// Forward pass, one unit per query row `(b, h, i)`; writes the packed
/// `[batch, heads, q_len, head_dim + 1]` result (output, then log-sum-exp).
#[cube(launch)]
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
    neg_inf: f32,
    column_offset: usize,
    #[comptime] head_dim: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let heads = q.shape(1);
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    if ABSOLUTE_POS >= q.shape(0) * heads * q_len {
        terminate!();
    }
    let (b, h, i) = split_row(ABSOLUTE_POS, heads, q_len);
    let scale = F::cast_from(scale);
    let q_at = b * q.stride(0) + h * q.stride(1) + i * q.stride(2);
    let k_base = b * k.stride(0) + h * k.stride(1);
    let v_base = b * v.stride(0) + h * v.stride(1);

    let mut acc = Array::<F>::new(head_dim);
    #[unroll]
    for c in 0..head_dim {
        acc[c] = F::new(0.0);
    }
    let mut max = F::new(0.0);
    let mut sum = F::new(0.0);
    let mut seen = false;
    for j in 0..k_len {
        if key_visible::<F>(mask, b, j, has_mask) {
            let s = scale
                * dot::<F>(
                    q,
                    q_at,
                    q.stride(3),
                    k,
                    k_base + j * k.stride(2),
                    k.stride(3),
                    head_dim,
                )
                + bias_at::<F, I>(
                    index,
                    table,
                    dense,
                    b,
                    h,
                    i,
                    j,
                    column_offset,
                    has_distance,
                    has_dense,
                );
            if !seen {
                max = s;
                seen = true;
            }
            let new_max = max.max(s);
            let alpha = (max - new_max).exp();
            let p = (s - new_max).exp();
            sum = sum * alpha + p;
            let v_at = v_base + j * v.stride(2);
            #[unroll]
            for c in 0..head_dim {
                acc[c] = acc[c] * alpha + p * v[v_at + c * v.stride(3)];
            }
            max = new_max;
        }
    }
    let out_at = b * packed.stride(0) + h * packed.stride(1) + i * packed.stride(2);
    let step = packed.stride(3);
    if seen {
        #[unroll]
        for c in 0..head_dim {
            packed[out_at + c * step] = acc[c] / sum;
        }
        packed[out_at + head_dim * step] = max + sum.ln();
    } else {
        #[unroll]
        for c in 0..head_dim {
            packed[out_at + c * step] = F::new(0.0);
        }
        packed[out_at + head_dim * step] = F::cast_from(neg_inf);
    }
}

/// Backward pass for the queries, one unit per query row `(b, h, i)`: `dq`, the row shift
/// `rowsum(dO∘O) − dLSE` (for [`key_backward_kernel`]), the dense-bias gradient row and the
/// row's contribution to every table bucket (`bucket_grad [batch, heads, q_len, buckets]`,
/// zero-initialized, summed over batch and rows afterwards).
#[cube(launch)]
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
    d_q: &mut Tensor<F>,
    shift_out: &mut Tensor<F>,
    d_dense: &mut Tensor<F>,
    bucket_grad: &mut Tensor<F>,
    scale: f32,
    column_offset: usize,
    #[comptime] head_dim: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let heads = q.shape(1);
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    if ABSOLUTE_POS >= q.shape(0) * heads * q_len {
        terminate!();
    }
    let (b, h, i) = split_row(ABSOLUTE_POS, heads, q_len);
    let scale = F::cast_from(scale);
    let q_at = b * q.stride(0) + h * q.stride(1) + i * q.stride(2);
    let k_base = b * k.stride(0) + h * k.stride(1);
    let v_base = b * v.stride(0) + h * v.stride(1);
    let o_at = b * packed.stride(0) + h * packed.stride(1) + i * packed.stride(2);
    let g_at = b * packed_grad.stride(0) + h * packed_grad.stride(1) + i * packed_grad.stride(2);
    let o_step = packed.stride(3);
    let g_step = packed_grad.stride(3);

    let delta = dot::<F>(packed, o_at, o_step, packed_grad, g_at, g_step, head_dim);
    let shift = delta - packed_grad[g_at + head_dim * g_step];
    let lse = packed[o_at + head_dim * o_step];

    let mut acc = Array::<F>::new(head_dim);
    #[unroll]
    for c in 0..head_dim {
        acc[c] = F::new(0.0);
    }
    for j in 0..k_len {
        let mut d_s = F::new(0.0);
        if key_visible::<F>(mask, b, j, has_mask) {
            let k_at = k_base + j * k.stride(2);
            let s = scale * dot::<F>(q, q_at, q.stride(3), k, k_at, k.stride(3), head_dim)
                + bias_at::<F, I>(
                    index,
                    table,
                    dense,
                    b,
                    h,
                    i,
                    j,
                    column_offset,
                    has_distance,
                    has_dense,
                );
            let p = (s - lse).exp();
            let d_p = dot::<F>(
                packed_grad,
                g_at,
                g_step,
                v,
                v_base + j * v.stride(2),
                v.stride(3),
                head_dim,
            );
            d_s = p * (d_p - shift);
            #[unroll]
            for c in 0..head_dim {
                acc[c] += d_s * k[k_at + c * k.stride(3)];
            }
            if has_distance {
                let at = b * index.stride(0)
                    + i * index.stride(1)
                    + (column_offset + j) * index.stride(2);
                let bucket = usize::cast_from(index[at]);
                let g = b * bucket_grad.stride(0)
                    + h * bucket_grad.stride(1)
                    + i * bucket_grad.stride(2)
                    + bucket * bucket_grad.stride(3);
                bucket_grad[g] += d_s;
            }
        }
        if has_dense {
            d_dense[b * d_dense.stride(0)
                + h * d_dense.stride(1)
                + i * d_dense.stride(2)
                + j * d_dense.stride(3)] = d_s;
        }
    }
    let dq_at = b * d_q.stride(0) + h * d_q.stride(1) + i * d_q.stride(2);
    #[unroll]
    for c in 0..head_dim {
        d_q[dq_at + c * d_q.stride(3)] = acc[c] * scale;
    }
    shift_out[b * shift_out.stride(0) + h * shift_out.stride(1) + i * shift_out.stride(2)] = shift;
}

/// Backward pass for the keys and values, one unit per key `(b, h, j)`: loops over the queries
/// with the row shifts of [`query_backward_kernel`] and writes `dk`, `dv`.
#[cube(launch)]
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
    scale: f32,
    column_offset: usize,
    #[comptime] head_dim: usize,
    #[comptime] has_distance: bool,
    #[comptime] has_dense: bool,
    #[comptime] has_mask: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let heads = k.shape(1);
    let q_len = q.shape(2);
    let k_len = k.shape(2);
    if ABSOLUTE_POS >= k.shape(0) * heads * k_len {
        terminate!();
    }
    let (b, h, j) = split_row(ABSOLUTE_POS, heads, k_len);
    let scale = F::cast_from(scale);
    let k_at = b * k.stride(0) + h * k.stride(1) + j * k.stride(2);
    let v_at = b * v.stride(0) + h * v.stride(1) + j * v.stride(2);
    let q_base = b * q.stride(0) + h * q.stride(1);
    let o_base = b * packed.stride(0) + h * packed.stride(1);
    let g_base = b * packed_grad.stride(0) + h * packed_grad.stride(1);
    let o_step = packed.stride(3);
    let g_step = packed_grad.stride(3);

    let mut acc_k = Array::<F>::new(head_dim);
    let mut acc_v = Array::<F>::new(head_dim);
    #[unroll]
    for c in 0..head_dim {
        acc_k[c] = F::new(0.0);
        acc_v[c] = F::new(0.0);
    }
    // a visible key is visible to every query row of its batch element, whose lse is finite
    if key_visible::<F>(mask, b, j, has_mask) {
        for i in 0..q_len {
            let q_at = q_base + i * q.stride(2);
            let g_at = g_base + i * packed_grad.stride(2);
            let s = scale * dot::<F>(q, q_at, q.stride(3), k, k_at, k.stride(3), head_dim)
                + bias_at::<F, I>(
                    index,
                    table,
                    dense,
                    b,
                    h,
                    i,
                    j,
                    column_offset,
                    has_distance,
                    has_dense,
                );
            let lse = packed[o_base + i * packed.stride(2) + head_dim * o_step];
            let p = (s - lse).exp();
            let d_p = dot::<F>(packed_grad, g_at, g_step, v, v_at, v.stride(3), head_dim);
            let row_shift = shift[b * shift.stride(0) + h * shift.stride(1) + i * shift.stride(2)];
            let d_s = p * (d_p - row_shift);
            #[unroll]
            for c in 0..head_dim {
                acc_k[c] += d_s * q[q_at + c * q.stride(3)];
                acc_v[c] += p * packed_grad[g_at + c * g_step];
            }
        }
    }
    let dk_at = b * d_k.stride(0) + h * d_k.stride(1) + j * d_k.stride(2);
    let dv_at = b * d_v.stride(0) + h * d_v.stride(1) + j * d_v.stride(2);
    #[unroll]
    for c in 0..head_dim {
        d_k[dk_at + c * d_k.stride(3)] = acc_k[c] * scale;
        d_v[dv_at + c * d_v.stride(3)] = acc_v[c];
    }
}

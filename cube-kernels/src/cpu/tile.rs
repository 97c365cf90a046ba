//! The arithmetic of one (query tile × key tile) block: three small matrix products written so
//! that the compiler vectorizes them (fixed 8-lane accumulators, no floating-point reductions in
//! loop order), and a vectorizable `exp`.
//!
//! Key tiles are stored transposed and padded: `kt[d * width + j]` for `d < head_dim`,
//! `j < width`, where `width` is the tile's key count rounded up to a multiple of [`LANES`] and
//! the padding columns hold zeros.
//!
//! Everything here is `#[inline(always)]`: the tasks that call it have a copy compiled for AVX2
//! (`#[target_feature(enable = "avx2")]`, chosen at run time), where the 8-lane accumulators
//! become single registers.

/// Lanes of the accumulators (one AVX register of `f32`, two SSE registers).
pub(crate) const LANES: usize = 8;

/// Rows handled together by the products (register blocking).
const ROWS: usize = 4;

/// `n` rounded up to a multiple of [`LANES`].
pub(crate) fn padded(n: usize) -> usize {
    n.div_ceil(LANES) * LANES
}

/// `c[i * c_stride + j] (+)= Σ_k a[i * a_row + k * a_inner] · b[k * b_stride + j]` for
/// `i < rows`, `j < cols` (a multiple of [`LANES`]), `k < inner`: the register-blocked product
/// behind the three row-major forms below ([`ROWS`] rows × [`LANES`] columns of accumulators
/// over the whole inner dimension). With `ACCUMULATE` it adds to `c`, otherwise it overwrites.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // one product: operands, their strides, the three sizes
fn gemm<const ACCUMULATE: bool>(
    a: &[f32],
    (a_row, a_inner): (usize, usize),
    b: &[f32],
    b_stride: usize,
    c: &mut [f32],
    c_stride: usize,
    rows: usize,
    inner: usize,
    cols: usize,
) {
    debug_assert_eq!(cols % LANES, 0);
    let mut i = 0;
    while i < rows {
        let block = (rows - i).min(ROWS);
        for j in (0..cols).step_by(LANES) {
            let mut acc = [[0.0f32; LANES]; ROWS];
            if ACCUMULATE {
                for (r, acc_row) in acc.iter_mut().enumerate().take(block) {
                    let at = (i + r) * c_stride + j;
                    acc_row.copy_from_slice(&c[at..at + LANES]);
                }
            }
            for k in 0..inner {
                let b8: &[f32; LANES] = b[k * b_stride + j..k * b_stride + j + LANES]
                    .try_into()
                    .expect("a lane chunk");
                for (r, acc_row) in acc.iter_mut().enumerate().take(block) {
                    let x = a[(i + r) * a_row + k * a_inner];
                    for l in 0..LANES {
                        acc_row[l] += x * b8[l];
                    }
                }
            }
            for (r, acc_row) in acc.iter().enumerate().take(block) {
                let at = (i + r) * c_stride + j;
                c[at..at + LANES].copy_from_slice(acc_row);
            }
        }
        i += block;
    }
}

/// The sizes of one (query tile × key tile) block, as the products below read them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockShape {
    /// Query rows of the tile.
    pub rows: usize,
    /// Channels per head.
    pub dim: usize,
    /// Keys of the key tile.
    pub keys: usize,
    /// `keys` padded to a multiple of [`LANES`]: the stride of transposed key tiles and of
    /// score rows.
    pub width: usize,
}

impl BlockShape {
    /// The block of `rows` query rows against a key tile of `keys` keys, `dim` channels each.
    pub(crate) fn new(rows: usize, dim: usize, keys: usize) -> Self {
        Self {
            rows,
            dim,
            keys,
            width: padded(keys),
        }
    }
}

/// `c[i * width + j] = Σ_d a[i * dim + d] · bt[d * width + j]` for `i < rows`, `j < width`:
/// `[rows, dim] · [dim, width]` with the right operand stored row-major (a transposed key tile).
#[inline(always)]
pub(crate) fn matmul_nn(a: &[f32], bt: &[f32], c: &mut [f32], shape: BlockShape) {
    let BlockShape {
        rows, dim, width, ..
    } = shape;
    gemm::<false>(a, (dim, 1), bt, width, c, width, rows, dim, width);
}

/// `c[i * dim + d] += Σ_j a[i * width + j] · bt[d * width + j]`: `[rows, width] · [width, dim]`
/// with the right operand stored transposed (`[dim, width]`, a transposed key or value tile).
#[inline(always)]
fn matmul_nt_acc(a: &[f32], bt: &[f32], c: &mut [f32], shape: BlockShape) {
    let BlockShape {
        rows, dim, width, ..
    } = shape;
    debug_assert_eq!(width % LANES, 0);
    for i in 0..rows {
        let a_row = &a[i * width..(i + 1) * width];
        for d in 0..dim {
            let b_row = &bt[d * width..(d + 1) * width];
            let mut acc = [0.0f32; LANES];
            for (a8, b8) in a_row.chunks_exact(LANES).zip(b_row.chunks_exact(LANES)) {
                for l in 0..LANES {
                    acc[l] += a8[l] * b8[l];
                }
            }
            c[i * dim + d] += lane_sum(&acc);
        }
    }
}

/// `c[i * dim + d] += Σ_{j < keys} a[i * width + j] · b[j * dim + d]`: `[rows, keys] ·
/// [keys, dim]` with the right operand in row layout (key or value rows), for `dim` a multiple of
/// [`LANES`]: each row's accumulators stay in registers over all keys.
#[inline(always)]
fn matmul_rows_acc(a: &[f32], b: &[f32], c: &mut [f32], shape: BlockShape) {
    let BlockShape {
        rows,
        dim,
        keys,
        width,
    } = shape;
    gemm::<true>(a, (width, 1), b, dim, c, dim, rows, keys, dim);
}

/// `c [rows, dim] += a [rows, width] · b`, where the keys `0..keys` of `b` are given both in row
/// layout (`b_rows [keys, dim]`) and as a transposed padded tile (`bt [dim, width]`): the row
/// form where `dim` allows it, the dot-product form otherwise. `a`'s columns past `keys` are 0.
#[inline(always)]
pub(crate) fn matmul_acc(a: &[f32], b_rows: &[f32], bt: &[f32], c: &mut [f32], shape: BlockShape) {
    if shape.dim.is_multiple_of(LANES) {
        matmul_rows_acc(a, b_rows, c, shape);
    } else {
        matmul_nt_acc(a, bt, c, shape);
    }
}

/// `ct[d * width + j] += Σ_i a[i * dim + d] · b[i * width + j]`: `[dim, rows] · [rows, width]`,
/// the transposed product that accumulates key and value gradients into a transposed tile.
#[inline(always)]
pub(crate) fn matmul_tn_acc(a: &[f32], b: &[f32], ct: &mut [f32], shape: BlockShape) {
    let BlockShape {
        rows, dim, width, ..
    } = shape;
    gemm::<true>(a, (1, dim), b, width, ct, width, dim, rows, width);
}

/// Sum of the lanes, pairwise.
#[inline(always)]
fn lane_sum(acc: &[f32; LANES]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Maximum of `xs` (`f32::NEG_INFINITY` when empty).
#[inline(always)]
pub(crate) fn max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for x8 in chunks {
        for l in 0..LANES {
            acc[l] = if x8[l] > acc[l] { x8[l] } else { acc[l] };
        }
    }
    let mut m = acc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &x in tail {
        m = m.max(x);
    }
    m
}

/// Sum of `xs`.
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for x8 in chunks {
        for l in 0..LANES {
            acc[l] += x8[l];
        }
    }
    lane_sum(&acc) + tail.iter().sum::<f32>()
}

/// `xs[j] = exp(xs[j] − shift)` for every `j`.
#[inline(always)]
pub(crate) fn exp_shifted(xs: &mut [f32], shift: f32) {
    for x in xs.iter_mut() {
        *x = exp(*x - shift);
    }
}

/// Below this `exp` returns exactly 0 (so `exp(-inf) = 0`); `e^-87.3` is the smallest normal
/// `f32`.
const EXP_LOW: f32 = -87.336_54;
/// Above this `exp` overflows to `+inf`.
const EXP_HIGH: f32 = 88.376_26;

/// `e^x` for `f32`, within 2 ulp of the correctly rounded result for normal results, `0` below
/// `-87.34` (also for `-inf`) and branch-free so that loops over it vectorize.
///
/// Cephes' `expf`: `x = n·ln2 + r` with `|r| ≤ ln2/2` (`ln2` split in two for an exact
/// product), a degree-6 polynomial for `e^r`, and `2^n` assembled in the exponent bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 · 2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    // not `f32::clamp`, which keeps NaN but compiles to a branchy sequence here
    #[allow(clippy::manual_clamp)]
    let clamped = if x < EXP_LOW {
        EXP_LOW
    } else if x > EXP_HIGH {
        EXP_HIGH
    } else {
        x
    };
    let shifted = clamped * LOG2E + ROUNDER;
    let n = shifted - ROUNDER;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits()) as i32;
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    let two_n = f32::from_bits(((n_bits + 127) as u32) << 23);
    let y = er * two_n;
    if x < EXP_LOW { 0.0 } else { y }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_and_exact_at_the_edges() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = f64::from(exp(x));
            let want = f64::from(x).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.013_7;
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-1e30), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::MIN), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    /// Plain triple loops over the same layouts.
    fn naive(a: &[f32], b: &[f32], rows: usize, dim: usize, width: usize) -> Vec<f32> {
        let mut c = vec![0.0; rows * width];
        for i in 0..rows {
            for j in 0..width {
                for d in 0..dim {
                    c[i * width + j] += a[i * dim + d] * b[d * width + j];
                }
            }
        }
        c
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0) - 1.0)
            .collect()
    }

    #[test]
    fn products_match_triple_loops() {
        for (rows, dim, width) in [
            (1, 1, 8),
            (3, 5, 16),
            (4, 8, 8),
            (7, 64, 24),
            (9, 3, 40),
            (5, 16, 32),
        ] {
            let a = values(rows * dim, 1);
            let bt = values(dim * width, 2);
            let mut c = vec![0.0; rows * width];
            let shape = BlockShape {
                rows,
                dim,
                keys: width,
                width,
            };
            matmul_nn(&a, &bt, &mut c, shape);
            let want = naive(&a, &bt, rows, dim, width);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-4, "nn {rows}x{dim}x{width}");
            }

            // c2 [rows, dim] += c [rows, width] · bt [dim, width]ᵀ
            let mut c2 = vec![1.0; rows * dim];
            matmul_nt_acc(&c, &bt, &mut c2, shape);
            for i in 0..rows {
                for d in 0..dim {
                    let dot: f32 = (0..width)
                        .map(|j| c[i * width + j] * bt[d * width + j])
                        .sum();
                    assert!(
                        (c2[i * dim + d] - 1.0 - dot).abs() < 1e-3,
                        "nt {rows}x{dim}x{width}"
                    );
                }
            }

            // the row form of the same product, where dim allows it
            if dim.is_multiple_of(LANES) {
                let keys = width - 3;
                let mut b_rows = vec![0.0; keys * dim];
                for j in 0..keys {
                    for d in 0..dim {
                        b_rows[j * dim + d] = bt[d * width + j];
                    }
                }
                let mut masked = c.clone();
                for i in 0..rows {
                    masked[i * width + keys..(i + 1) * width].fill(0.0);
                }
                let mut c3 = vec![1.0; rows * dim];
                let mut c4 = vec![1.0; rows * dim];
                let shape = BlockShape { keys, ..shape };
                matmul_acc(&masked, &b_rows, &bt, &mut c3, shape);
                matmul_nt_acc(&masked, &bt, &mut c4, shape);
                for (x, y) in c3.iter().zip(&c4) {
                    assert!((x - y).abs() < 1e-3, "rows {rows}x{dim}x{width}");
                }
            }

            // ct [dim, width] += a [rows, dim]ᵀ · c [rows, width]
            let mut ct = vec![0.5; dim * width];
            matmul_tn_acc(&a, &c, &mut ct, shape);
            for d in 0..dim {
                for j in 0..width {
                    let dot: f32 = (0..rows).map(|i| a[i * dim + d] * c[i * width + j]).sum();
                    assert!(
                        (ct[d * width + j] - 0.5 - dot).abs() < 1e-3,
                        "tn {rows}x{dim}x{width}"
                    );
                }
            }
        }
    }

    #[test]
    fn reductions_cover_the_tail() {
        let xs: Vec<f32> = (0..19).map(|i| i as f32 - 3.0).collect();
        assert_eq!(max(&xs), 15.0);
        assert_eq!(sum(&xs), xs.iter().sum::<f32>());
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        let mut e = vec![0.0, -1.0, f32::NEG_INFINITY];
        exp_shifted(&mut e, 1.0);
        assert!((e[0] - (-1.0f32).exp()).abs() < 1e-7);
        assert_eq!(e[2], 0.0);
    }
}

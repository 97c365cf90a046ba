//! Sparse edge attention fused for the [`Flex`] CPU backend: one rayon task per (batch, head,
//! position), walking that row's edges as grouped by [`HostEdges`], in `f32` on the tensors' host
//! memory, with no per-edge tensor.
//!
//! Forward: per query, `w = exp(clamp(scale · q·k_src))` over its incoming edges, `out = Σ w ·
//! v_src / (Σ w + ε)`; the normalizer `Σ w + ε` is returned for the backward pass. Backward (the
//! [reference](crate::reference::sparse_edge)'s formulas): `δ = dO·out` per query, then one pass
//! per query over its incoming edges for `dq`, and one per key over its outgoing edges for `dk`
//! and `dv`, each recomputing the edge's weight. Every output row is written by one task that
//! adds its edges in the order they were given, so the results are the same bits for any number
//! of threads.
//!
//! `f16` and `bf16` inputs are converted to `f32` copies first; the output and the gradients are
//! cast back to their inputs' dtypes, the normalizer stays `f32`. `f64` inputs go to the
//! reference implementation.

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::tensor::ops::FloatTensor;
use burn::tensor::DType;
use rayon::prelude::*;

use super::{contiguous_f32, dims4, floats, tensor};
use crate::edge_csr::HostEdges;
use crate::precision::{narrow, widen};
use crate::primitives::{SparseEdgeGrads, SparseEdgeInputs, SparseEdgeOutput};
use crate::reference::sparse_edge as reference;
use crate::sparse_edge::{NORMALIZER_EPSILON, SCORE_CLAMP};

/// (batch, head, position) rows per rayon task at least.
const MIN_ROWS_PER_TASK: usize = 32;

/// `a · b` with eight independent partial sums (so the compiler keeps them in one vector).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `acc += factor · x`.
#[inline(always)]
fn add_scaled(acc: &mut [f32], factor: f32, x: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a += factor * b;
    }
}

/// The op's inputs as contiguous `f32` host memory.
struct HostSparse<'a> {
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    edges: &'a HostEdges,
    heads: usize,
    seq: usize,
    head_dim: usize,
    scale: f32,
}

impl<'a> HostSparse<'a> {
    /// Host views of `inputs` (already widened), or `None` for a float dtype other than `f32`.
    fn new(inputs: &'a SparseEdgeInputs<Flex>) -> Option<Self> {
        let q = contiguous_f32(&inputs.q)?;
        let k = contiguous_f32(&inputs.k)?;
        let v = contiguous_f32(&inputs.v)?;
        let [_, heads, seq, head_dim] = dims4(&q);
        Some(Self {
            q,
            k,
            v,
            edges: &inputs.host,
            heads,
            seq,
            head_dim,
            scale: inputs.scale,
        })
    }

    /// Number of (batch, head, position) rows.
    fn rows(&self) -> usize {
        floats(&self.q).len() / self.head_dim.max(1)
    }

    /// Row `row` (a flat (batch, head, position) index) of `data`.
    #[inline(always)]
    fn row<'t>(&self, data: &'t [f32], row: usize) -> &'t [f32] {
        &data[row * self.head_dim..(row + 1) * self.head_dim]
    }

    /// For the flat row `row`: its edge row (`b · seq + position`) and the flat row of position
    /// 0 of its (batch, head), minus `b · seq`, so that `offset + edge row` is the flat row of
    /// an edge's other end.
    #[inline(always)]
    fn locate(&self, row: usize) -> (usize, usize) {
        let (bh, position) = (row / self.seq, row % self.seq);
        let edge_row = (bh / self.heads) * self.seq + position;
        (edge_row, bh * self.seq + position - edge_row)
    }

    /// The logit `s = scale · q_i·k_j` of flat rows `i` (query) and `j` (key): the weight
    /// `exp(clamp(s))` and whether `s` is inside the clamp (where the gradient passes).
    #[inline(always)]
    fn weight(&self, q: &[f32], k: &[f32], i: usize, j: usize) -> (f32, bool) {
        let s = dot(self.row(q, i), self.row(k, j)) * self.scale;
        (
            s.clamp(-SCORE_CLAMP, SCORE_CLAMP).exp(),
            s > -SCORE_CLAMP && s < SCORE_CLAMP,
        )
    }

    /// The forward pass: output rows `[rows · head_dim]` and normalizers `[rows]`.
    fn forward(&self) -> (Vec<f32>, Vec<f32>) {
        let (q, k, v) = (floats(&self.q), floats(&self.k), floats(&self.v));
        let mut out = vec![0.0f32; self.rows() * self.head_dim];
        let mut normalizer = vec![0.0f32; self.rows()];
        out.par_chunks_mut(self.head_dim.max(1))
            .zip(normalizer.par_iter_mut())
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(i, (o, norm))| {
                let (edge_row, offset) = self.locate(i);
                let mut sum = 0.0f32;
                for &src in self.edges.incoming(edge_row) {
                    let j = offset + src as usize;
                    let (w, _) = self.weight(q, k, i, j);
                    sum += w;
                    add_scaled(o, w, self.row(v, j));
                }
                let den = sum + NORMALIZER_EPSILON;
                o.iter_mut().for_each(|x| *x /= den);
                *norm = den;
            });
        (out, normalizer)
    }

    /// The backward pass from the saved output and normalizer and the output's gradient:
    /// `(dq, dk, dv)` rows.
    fn backward(&self, out: &[f32], normalizer: &[f32], d_out: &[f32]) -> [Vec<f32>; 3] {
        let (q, k, v) = (floats(&self.q), floats(&self.k), floats(&self.v));
        let (dh, rows) = (self.head_dim.max(1), self.rows());
        let delta: Vec<f32> = (0..rows)
            .into_par_iter()
            .map(|i| dot(self.row(d_out, i), self.row(out, i)))
            .collect();
        // the gradient of edge i ← j's logit (zero where clamped), and its weight
        let d_logit = |i: usize, j: usize| {
            let (w, inside) = self.weight(q, k, i, j);
            let d_w = (dot(self.row(d_out, i), self.row(v, j)) - delta[i]) / normalizer[i];
            (if inside { d_w * w * self.scale } else { 0.0 }, w)
        };
        let mut dq = vec![0.0f32; rows * self.head_dim];
        dq.par_chunks_mut(dh)
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(i, g)| {
                let (edge_row, offset) = self.locate(i);
                for &src in self.edges.incoming(edge_row) {
                    let j = offset + src as usize;
                    add_scaled(g, d_logit(i, j).0, self.row(k, j));
                }
            });
        let (mut dk, mut dv) = (vec![0.0f32; rows * self.head_dim], vec![0.0f32; rows * self.head_dim]);
        dk.par_chunks_mut(dh)
            .zip(dv.par_chunks_mut(dh))
            .enumerate()
            .with_min_len(MIN_ROWS_PER_TASK)
            .for_each(|(j, (gk, gv))| {
                let (edge_row, offset) = self.locate(j);
                for &dst in self.edges.outgoing(edge_row) {
                    let i = offset + dst as usize;
                    let (d_s, w) = d_logit(i, j);
                    add_scaled(gk, d_s, self.row(q, i));
                    add_scaled(gv, w / normalizer[i], self.row(d_out, i));
                }
            });
        [dq, dk, dv]
    }
}

/// `inputs` with `q`, `k`, `v` in their compute dtype, and the dtypes they had.
fn widen_inputs(inputs: SparseEdgeInputs<Flex>) -> (SparseEdgeInputs<Flex>, [DType; 3]) {
    let dtypes = [inputs.q.dtype(), inputs.k.dtype(), inputs.v.dtype()];
    let wide = SparseEdgeInputs {
        q: widen::<Flex>(inputs.q),
        k: widen::<Flex>(inputs.k),
        v: widen::<Flex>(inputs.v),
        ..inputs
    };
    (wide, dtypes)
}

/// The forward pass on Flex: fused for `f32` (and widened half-precision) inputs, the reference
/// otherwise.
pub(super) fn forward(inputs: SparseEdgeInputs<Flex>) -> SparseEdgeOutput<Flex> {
    let (inputs, [q_dtype, ..]) = widen_inputs(inputs);
    let Some(host) = HostSparse::new(&inputs) else {
        return reference::forward(inputs);
    };
    let [batch, heads, seq, head_dim] = dims4(&host.q);
    let (out, normalizer) = host.forward();
    SparseEdgeOutput {
        out: narrow::<Flex>(tensor(out, vec![batch, heads, seq, head_dim]), q_dtype),
        normalizer: tensor(normalizer, vec![batch, heads, seq]),
    }
}

/// The backward pass on Flex: fused for `f32` (and widened half-precision) inputs, the reference
/// otherwise. Each gradient has its input's dtype.
pub(super) fn backward(
    inputs: SparseEdgeInputs<Flex>,
    output: SparseEdgeOutput<Flex>,
    grad: FloatTensor<Flex>,
) -> SparseEdgeGrads<Flex> {
    let (inputs, dtypes) = widen_inputs(inputs);
    let output = SparseEdgeOutput {
        out: widen::<Flex>(output.out),
        normalizer: widen::<Flex>(output.normalizer),
    };
    let grad = widen::<Flex>(grad);
    let saved = [&output.out, &output.normalizer, &grad].map(contiguous_f32);
    let (Some(host), [Some(out), Some(normalizer), Some(d_out)]) = (HostSparse::new(&inputs), saved) else {
        return reference::backward(inputs, output, grad);
    };
    let shape = dims4(&host.q).to_vec();
    let [dq, dk, dv] = host.backward(floats(&out), floats(&normalizer), floats(&d_out));
    let [q, k, v] = [dq, dk, dv].map(|g| tensor(g, shape.clone()));
    SparseEdgeGrads {
        q: narrow::<Flex>(q, dtypes[0]),
        k: narrow::<Flex>(k, dtypes[1]),
        v: narrow::<Flex>(v, dtypes[2]),
    }
}

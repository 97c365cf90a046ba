//! Sparse edge attention with Burn tensor ops (select, select_assign with add): what
//! [`GraphAttentionBackend`](crate::GraphAttentionBackend)'s default sparse edge methods run on
//! every backend, public so that tests and benchmarks can compare a backend's own path with it.
//!
//! Per edge `src → dst` and head, `s = scale · q_dst·k_src`, `w = exp(clamp(s, -5, 5))`; per
//! query `N = Σ w · v_src`, `D = Σ w + ε`, `out = N / D`. Backward, with `δ = dO·out` per query:
//! `dw = (dO_dst·v_src − δ_dst) / D_dst`, `ds = dw · w` where `-5 < s < 5` (zero where clamped),
//! `dq_dst += scale · ds · k_src`, `dk_src += scale · ds · q_dst`, `dv_src += w · dO_dst / D_dst`.
//! Memory is `O(edges · heads · head_dim)`.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{IndexingUpdateOp, Int, Tensor};

use crate::primitives::{SparseEdgeGrads, SparseEdgeInputs, SparseEdgeOutput};
use crate::reference::{float, primitive};
use crate::sparse_edge::{NORMALIZER_EPSILON, SCORE_CLAMP};

/// The inputs as `[batch · seq, heads, head_dim]` rows, with their edge indices and sizes.
struct Rows<B: Backend> {
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    src: Tensor<B, 1, Int>,
    dst: Tensor<B, 1, Int>,
    dims: [usize; 4],
    scale: f32,
}

/// `[batch, heads, seq, head_dim]` as `[batch · seq, heads, head_dim]` rows.
fn to_rows<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 3> {
    let t = float::<B, 4>(t);
    let [batch, heads, seq, head_dim] = t.dims();
    t.swap_dims(1, 2).reshape([batch * seq, heads, head_dim])
}

/// `[batch · seq, heads, width]` rows back as `[batch, heads, seq, width]`.
fn from_rows<B: Backend>(t: Tensor<B, 3>, batch: usize, seq: usize) -> Tensor<B, 4> {
    let [_, heads, width] = t.dims();
    t.reshape([batch, seq, heads, width]).swap_dims(1, 2)
}

impl<B: Backend> Rows<B> {
    fn new(inputs: SparseEdgeInputs<B>) -> Self {
        let dims = float::<B, 4>(inputs.q.clone()).dims();
        Self {
            q: to_rows::<B>(inputs.q),
            k: to_rows::<B>(inputs.k),
            v: to_rows::<B>(inputs.v),
            src: Tensor::from_primitive(inputs.src),
            dst: Tensor::from_primitive(inputs.dst),
            dims,
            scale: inputs.scale,
        }
    }

    /// Per edge and head: the gathered query, key and value rows `[edges, heads, head_dim]`, the
    /// scaled logits `s` and the weights `w = exp(clamp(s))`, `[edges, heads, 1]`.
    #[allow(clippy::type_complexity)]
    fn edge_weights(&self) -> (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>) {
        let queries = self.q.clone().select(0, self.dst.clone());
        let keys = self.k.clone().select(0, self.src.clone());
        let values = self.v.clone().select(0, self.src.clone());
        let logits = (queries.clone() * keys.clone()).sum_dim(2).mul_scalar(self.scale);
        let weights = logits.clone().clamp(-SCORE_CLAMP, SCORE_CLAMP).exp();
        (queries, keys, values, logits, weights)
    }

    /// Zeros of `[batch · seq, heads, width]` with `update` added at `rows`.
    fn scatter(&self, rows: &Tensor<B, 1, Int>, update: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, heads, seq, _] = self.dims;
        let width = update.dims()[2];
        Tensor::<B, 3>::zeros([batch * seq, heads, width], &update.device()).select_assign(
            0,
            rows.clone(),
            update,
            IndexingUpdateOp::Add,
        )
    }
}

/// Forward pass (see the [module](self)).
pub fn forward<B: Backend>(inputs: SparseEdgeInputs<B>) -> SparseEdgeOutput<B> {
    let rows = Rows::new(inputs);
    let [batch, _, seq, _] = rows.dims;
    let (_, _, values, _, weights) = rows.edge_weights();
    let numerator = rows.scatter(&rows.dst, weights.clone() * values);
    let normalizer = rows.scatter(&rows.dst, weights).add_scalar(NORMALIZER_EPSILON);
    let out = numerator / normalizer.clone();
    SparseEdgeOutput {
        out: primitive(from_rows(out, batch, seq)),
        normalizer: primitive(from_rows(normalizer, batch, seq).squeeze_dim::<3>(3)),
    }
}

/// Backward pass: recomputes the per-edge weights, divides by the saved normalizer (see the
/// [module](self) for the formulas). `grad` is the gradient of the loss with respect to `out`.
pub fn backward<B: Backend>(
    inputs: SparseEdgeInputs<B>,
    output: SparseEdgeOutput<B>,
    grad: FloatTensor<B>,
) -> SparseEdgeGrads<B> {
    let rows = Rows::new(inputs);
    let [batch, _, seq, _] = rows.dims;
    let out = to_rows::<B>(output.out);
    let d_out = to_rows::<B>(grad);
    let normalizer = float::<B, 3>(output.normalizer).unsqueeze_dim::<4>(3);
    let normalizer = normalizer.swap_dims(1, 2).reshape([batch * seq, rows.dims[1], 1]);
    let (queries, keys, values, logits, weights) = rows.edge_weights();
    let delta = (d_out.clone() * out).sum_dim(2);
    let d_out_e = d_out.select(0, rows.dst.clone());
    let inv_den = normalizer.recip().select(0, rows.dst.clone());
    let d_w = ((d_out_e.clone() * values).sum_dim(2) - delta.select(0, rows.dst.clone())) * inv_den.clone();
    let inside = logits.abs().lower_elem(SCORE_CLAMP).float();
    let d_s = (d_w * weights.clone() * inside).mul_scalar(rows.scale);
    let dq = rows.scatter(&rows.dst, d_s.clone() * keys);
    let dk = rows.scatter(&rows.src, d_s * queries);
    let dv = rows.scatter(&rows.src, weights * inv_den * d_out_e);
    let back = |t: Tensor<B, 3>| primitive(from_rows(t, batch, seq));
    SparseEdgeGrads {
        q: back(dq),
        k: back(dk),
        v: back(dv),
    }
}

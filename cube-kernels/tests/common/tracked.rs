//! Forward and backward of the op on an autodiff backend with every differentiable input
//! tracked, the results flattened to `f64` for comparison.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Bool, DType, Tensor, TensorData};
use megagraph_kernels::{AttentionOptions, GraphAttentionBackend, graph_attention};

use super::{Case, tensor, values};

/// How [`tracked_run`] feeds the op.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub block_size: usize,
    /// The distance index as a sparse index.
    pub sparse: bool,
    /// `q` reaches the op as a non-contiguous view (`[batch, q_len, heads, head_dim]` storage
    /// with dims 1 and 2 swapped, as a model splitting heads produces it).
    pub permuted: bool,
    /// The dtype of the float inputs (q, k, v, table, dense bias) and of the output's upstream
    /// gradient; the values are cast to it before they become leaves.
    pub dtype: DType,
}

impl RunOptions {
    /// Dense index, contiguous `q`.
    pub fn block(block_size: usize) -> Self {
        Self {
            block_size,
            sparse: false,
            permuted: false,
            dtype: DType::F32,
        }
    }
}

/// The names of [`tracked_run`]'s results for `case`.
pub fn result_names(case: &Case) -> Vec<&'static str> {
    let mut names = vec!["output", "lse", "dq", "dk", "dv"];
    if case.index.is_some() {
        names.push("dtable");
    }
    if case.dense.is_some() {
        names.push("ddense");
    }
    names
}

/// Output, lse and the gradients (q, k, v, then table and dense when present, see
/// [`result_names`]) of `Σ out∘r_out + Σ lse∘r_lse` (rows with a visible key) on the autodiff
/// backend `A`.
pub fn tracked_run<A: GraphAttentionBackend + AutodiffBackend>(
    case: &Case,
    device: &A::Device,
    options: RunOptions,
    r_out: &[f32],
    r_lse: &[f32],
) -> Vec<Vec<f64>> {
    let d = case.dims;
    let q_leaf = if options.permuted {
        let stored = tensor::<A, 4>(&case.q, case.q_shape(), device)
            .swap_dims(1, 2)
            .into_data();
        Tensor::<A, 4>::from_data(stored, device)
            .cast(options.dtype)
            .require_grad()
    } else {
        tensor::<A, 4>(&case.q, case.q_shape(), device)
            .cast(options.dtype)
            .require_grad()
    };
    let q = if options.permuted {
        q_leaf.clone().swap_dims(1, 2)
    } else {
        q_leaf.clone()
    };
    let leaf = |t: Tensor<A, 4>| t.cast(options.dtype).require_grad();
    let k = leaf(tensor::<A, 4>(&case.k, case.kv_shape(), device));
    let v = leaf(tensor::<A, 4>(&case.v, case.kv_shape(), device));
    let mut bias = case.bias_with::<A>(device, options.sparse);
    if let Some(distance) = &mut bias.distance {
        distance.table = distance.table.clone().cast(options.dtype).require_grad();
    }
    bias.dense = bias.dense.map(leaf);
    let table = bias.distance.as_ref().map(|dist| dist.table.clone());
    let dense = bias.dense.clone();
    let attention = AttentionOptions {
        scale: Some(case.scale),
        block_size: options.block_size,
    };
    let result = graph_attention(q, k.clone(), v.clone(), bias, &attention)
        .unwrap_or_else(|e| panic!("{e}"));
    let unseen = Tensor::<A, 3, Bool>::from_data(
        TensorData::new(case.all_masked_rows(), [d.batch, d.heads, d.q_len]),
        device,
    );
    let mut found = vec![values(result.output.clone()), values(result.lse.clone())];
    // the output's term in the output's dtype (its upstream gradient is `r_out` in that
    // dtype), summed into the lse's dtype
    let r_out = tensor::<A, 4>(r_out, case.q_shape(), device).cast(result.output.dtype());
    let lse_dtype = result.lse.dtype();
    let loss = (result.output * r_out).sum().cast(lse_dtype)
        + (result.lse.mask_fill(unseen, 0.0)
            * tensor::<A, 3>(r_lse, [d.batch, d.heads, d.q_len], device))
        .sum();
    let grads = loss.backward();
    let grad4 = |t: &Tensor<A, 4>| values(t.grad(&grads).expect("gradient of an input"));
    let d_q = q_leaf.grad(&grads).expect("gradient of q");
    found.push(values(if options.permuted {
        d_q.swap_dims(1, 2)
    } else {
        d_q
    }));
    found.extend([grad4(&k), grad4(&v)]);
    if let Some(table) = table {
        found.push(values(table.grad(&grads).expect("table gradient")));
    }
    if let Some(dense) = dense {
        found.push(grad4(&dense));
    }
    found
}

//! Gradients of the op on `Autodiff<Flex>` against an analytic float64 backward, itself checked
//! against central finite differences of the float64 forward.

use crate::common;

use burn::backend::{Autodiff, Flex};
use common::tracked::{RunOptions, tracked_run};
use common::{
    Case, Dims, Features, Grads64, Inputs64, assert_close, assert_close_to_scale, seeded_rng,
    uniform,
};
use megagraph_kernels::{AttentionOptions, graph_attention};
use rand::Rng;

type B = Autodiff<Flex>;

const TOL: f64 = 1e-5;

/// Loss of the tests: `Σ out∘r_out + Σ lse∘r_lse` over rows with a visible key.
fn loss64(case: &Case, x: &Inputs64, r_out: &[f64], r_lse: &[f64]) -> f64 {
    let (out, lse) = case.forward64(x);
    let a: f64 = out.iter().zip(r_out).map(|(o, r)| o * r).sum();
    let b: f64 = lse
        .iter()
        .zip(r_lse)
        .filter(|(l, _)| l.is_finite())
        .map(|(l, r)| l * r)
        .sum();
    a + b
}

/// `r_lse` with zeros on rows without a visible key (their lse is -inf, left out of the loss).
fn lse_weights(case: &Case, r_lse: &[f64]) -> Vec<f64> {
    case.all_masked_rows()
        .iter()
        .zip(r_lse)
        .map(|(&masked, &r)| if masked { 0.0 } else { r })
        .collect()
}

#[test]
fn analytic_reference_backward_matches_finite_differences() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("analytic_reference_backward_matches_finite_differences");
    let dims = Dims {
        batch: 2,
        heads: 2,
        q_len: 3,
        k_len: 4,
        head_dim: 3,
        buckets: 3,
        total_k_len: 6,
        column_offset: 1,
    };
    let features = Features {
        distance: true,
        dense: true,
        mask: true,
        all_masked_batch: true,
    };
    let mut case = Case::random(&mut rng, dims, features);
    // batch 1: exactly one masked key, so it has visible keys
    if let Some(mask) = &mut case.mask {
        mask[4..].copy_from_slice(&[false, true, false, false]);
    }
    let x = case.inputs64();
    let (out, lse) = case.forward64(&x);
    let r_out: Vec<f64> = uniform(&mut rng, out.len(), 1.0)
        .into_iter()
        .map(f64::from)
        .collect();
    let r_lse = lse_weights(
        &case,
        &uniform(&mut rng, lse.len(), 1.0)
            .into_iter()
            .map(f64::from)
            .collect::<Vec<_>>(),
    );
    let analytic = case.backward64(&x, &r_out, &r_lse);

    let eps = 1e-6;
    let fd = |get: fn(&mut Inputs64) -> &mut Vec<f64>| -> Vec<f64> {
        let n = get(&mut x.clone()).len();
        (0..n)
            .map(|i| {
                let (mut plus, mut minus) = (x.clone(), x.clone());
                get(&mut plus)[i] += eps;
                get(&mut minus)[i] -= eps;
                (loss64(&case, &plus, &r_out, &r_lse) - loss64(&case, &minus, &r_out, &r_lse))
                    / (2.0 * eps)
            })
            .collect()
    };
    let tol = 1e-7;
    assert_close("fd q", &analytic.q, &fd(|x| &mut x.q), tol, seed);
    assert_close("fd k", &analytic.k, &fd(|x| &mut x.k), tol, seed);
    assert_close("fd v", &analytic.v, &fd(|x| &mut x.v), tol, seed);
    assert_close(
        "fd table",
        &analytic.table,
        &fd(|x| &mut x.table),
        tol,
        seed,
    );
    let dense_fd = fd(|x| {
        x.dense
            .as_mut()
            .unwrap_or_else(|| unreachable!("case has a dense bias"))
    });
    assert_close(
        "fd dense",
        analytic.dense.as_deref().unwrap_or_default(),
        &dense_fd,
        tol,
        seed,
    );
    // the gradients are not trivially zero
    assert!(
        analytic.q.iter().any(|g| g.abs() > 1e-3) && analytic.table.iter().any(|g| g.abs() > 1e-3)
    );
}

/// Runs forward + backward of the op on `Autodiff<Flex>` with every input tracked and
/// returns the gradients as float64.
fn op_gradients(case: &Case, block_size: usize, r_out: &[f32], r_lse: &[f32]) -> Grads64 {
    let device = Default::default();
    let mut found = tracked_run::<B>(case, &device, RunOptions::block(block_size), r_out, r_lse)
        .into_iter()
        .skip(2);
    let mut next = || found.next().unwrap_or_else(|| panic!("missing gradient"));
    let (q, k, v) = (next(), next(), next());
    let table = if case.index.is_some() {
        next()
    } else {
        Vec::new()
    };
    Grads64 {
        q,
        k,
        v,
        table,
        table_scale: Vec::new(),
        dense: case.dense.is_some().then(next),
    }
}

fn compare(case: &Case, block_size: usize, rng: &mut rand_chacha::ChaCha8Rng, seed: u64) {
    let d = case.dims;
    let r_out = uniform(rng, d.batch * d.heads * d.q_len * d.head_dim, 1.0);
    let r_lse = uniform(rng, d.batch * d.heads * d.q_len, 1.0);
    let got = op_gradients(case, block_size, &r_out, &r_lse);
    let to64 = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    let want = case.backward64(
        &case.inputs64(),
        &to64(&r_out),
        &lse_weights(case, &to64(&r_lse)),
    );
    let label = format!("dims {:?} block {block_size}", d);
    assert_close(&format!("{label} dq"), &got.q, &want.q, TOL, seed);
    assert_close(&format!("{label} dk"), &got.k, &want.k, TOL, seed);
    assert_close(&format!("{label} dv"), &got.v, &want.v, TOL, seed);
    if case.index.is_some() {
        // each entry sums every pair of its bucket and head, and with few buckets these nearly
        // cancel: measured against the terms' scale
        assert_close_to_scale(
            &format!("{label} dtable"),
            &got.table,
            &want.table,
            &want.table_scale,
            TOL,
            seed,
        );
    }
    if let (Some(g), Some(w)) = (&got.dense, &want.dense) {
        assert_close(&format!("{label} ddense"), g, w, TOL, seed);
    }
}

#[test]
fn op_gradients_match_reference_over_heads_and_head_dims() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("op_gradients_match_reference_over_heads_and_head_dims");
    for heads in [1, 3, 8] {
        for head_dim in [8, 16, 64] {
            let k_len = rng.random_range(1..100);
            let column_offset = rng.random_range(0..10);
            let dims = Dims {
                batch: rng.random_range(1..3),
                heads,
                q_len: rng.random_range(1..30),
                k_len,
                head_dim,
                buckets: rng.random_range(1..30),
                total_k_len: column_offset + k_len + rng.random_range(0..5),
                column_offset,
            };
            let features = Features {
                distance: true,
                dense: rng.random_bool(0.5),
                mask: rng.random_bool(0.7),
                all_masked_batch: false,
            };
            let case = Case::random(&mut rng, dims, features);
            compare(
                &case,
                [1, 7, 16, 32, 128][rng.random_range(0..5)],
                &mut rng,
                seed,
            );
        }
    }
}

#[test]
fn gradients_with_all_masked_rows_are_finite_and_exact() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("gradients_with_all_masked_rows_are_finite_and_exact");
    let dims = Dims {
        batch: 2,
        heads: 3,
        q_len: 9,
        k_len: 45,
        head_dim: 16,
        buckets: 7,
        total_k_len: 50,
        column_offset: 5,
    };
    let features = Features {
        distance: true,
        dense: true,
        mask: true,
        all_masked_batch: true,
    };
    let case = Case::random(&mut rng, dims, features);
    compare(&case, 16, &mut rng, seed);
    // the masked batch's queries get exactly zero gradient, and nothing is NaN or infinite
    let r_out = uniform(
        &mut rng,
        dims.batch * dims.heads * dims.q_len * dims.head_dim,
        1.0,
    );
    let r_lse = uniform(&mut rng, dims.batch * dims.heads * dims.q_len, 1.0);
    let got = op_gradients(&case, 16, &r_out, &r_lse);
    let per_batch = dims.heads * dims.q_len * dims.head_dim;
    assert!(got.q[..per_batch].iter().all(|&g| g == 0.0), "seed {seed}");
    assert!(
        got.q
            .iter()
            .chain(&got.k)
            .chain(&got.v)
            .chain(&got.table)
            .all(|g| g.is_finite())
    );
}

#[test]
fn untracked_inputs_get_no_gradient() {
    let _turn = crate::turn();
    let (mut rng, _seed) = seeded_rng("untracked_inputs_get_no_gradient");
    let dims = Dims {
        batch: 1,
        heads: 2,
        q_len: 4,
        k_len: 6,
        head_dim: 8,
        buckets: 3,
        total_k_len: 6,
        column_offset: 0,
    };
    let features = Features {
        distance: true,
        dense: true,
        mask: false,
        all_masked_batch: false,
    };
    let case = Case::random(&mut rng, dims, features);
    let device = Default::default();
    let q = common::tensor::<B, 4>(&case.q, case.q_shape(), &device).require_grad();
    let k = common::tensor::<B, 4>(&case.k, case.kv_shape(), &device);
    let v = common::tensor::<B, 4>(&case.v, case.kv_shape(), &device).require_grad();
    let bias = case.bias::<B>(&device);
    let table = bias.distance.as_ref().map(|d| d.table.clone());
    let dense = bias.dense.clone();
    let result = graph_attention(
        q.clone(),
        k.clone(),
        v.clone(),
        bias,
        &AttentionOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let grads = (result.output.sum() + result.lse.sum()).backward();
    assert!(q.grad(&grads).is_some());
    assert!(v.grad(&grads).is_some());
    assert!(k.grad(&grads).is_none());
    assert!(table.and_then(|t| t.grad(&grads)).is_none());
    assert!(dense.and_then(|t| t.grad(&grads)).is_none());
}

//! `merge_partials` over the blocks of a split key range equals the op over the whole range, in
//! values and in gradients.

use crate::common;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Bool, Tensor, TensorData};
use common::{Case, Dims, Features, assert_close, seeded_rng, uniform, values};
use megagraph_kernels::{
    AttentionBias, AttentionOptions, AttentionOutput, DistanceBias, graph_attention, merge_partials,
};
use rand::Rng;

type B = Autodiff<Flex>;

const TOL: f64 = 1e-5;

/// Tracked inputs of one case.
struct Leaves {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    table: Tensor<B, 2>,
    dense: Tensor<B, 4>,
}

fn leaves(case: &Case) -> Leaves {
    let device = Default::default();
    let d = case.dims;
    Leaves {
        q: common::tensor(&case.q, case.q_shape(), &device).require_grad(),
        k: common::tensor(&case.k, case.kv_shape(), &device).require_grad(),
        v: common::tensor(&case.v, case.kv_shape(), &device).require_grad(),
        table: common::tensor(&case.table, [d.buckets, d.heads], &device).require_grad(),
        dense: common::tensor(
            case.dense.as_deref().unwrap_or_default(),
            [d.batch, d.heads, d.q_len, d.k_len],
            &device,
        )
        .require_grad(),
    }
}

/// The op on keys `[j0, j1)` of the case, reading the shared index at column `column_offset + j0`.
fn block(case: &Case, x: &Leaves, j0: usize, j1: usize, block_size: usize) -> AttentionOutput<B> {
    let device = Default::default();
    let d = case.dims;
    let index = DistanceBias::<B>::index_from_u8(
        case.index.clone().unwrap_or_default(),
        [d.batch, d.q_len, d.total_k_len],
        &device,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mask = case.mask.as_ref().map(|m| {
        Tensor::<B, 2, Bool>::from_data(TensorData::new(m.clone(), [d.batch, d.k_len]), &device)
            .slice([0..d.batch, j0..j1])
    });
    let bias = AttentionBias {
        distance: Some(DistanceBias {
            index: index.into(),
            table: x.table.clone(),
            column_offset: d.column_offset + j0,
        }),
        dense: Some(
            x.dense
                .clone()
                .slice([0..d.batch, 0..d.heads, 0..d.q_len, j0..j1]),
        ),
        key_padding_mask: mask,
    };
    let kv = |t: &Tensor<B, 4>| t.clone().slice([0..d.batch, 0..d.heads, j0..j1]);
    let options = AttentionOptions {
        scale: Some(case.scale),
        block_size,
    };
    graph_attention(x.q.clone(), kv(&x.k), kv(&x.v), bias, &options)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Values and gradients (q, k, v, table, dense) of `Σ out∘r_out + Σ lse∘r_lse` (rows with a
/// visible key) for `result` computed from `x`.
fn evaluate(
    case: &Case,
    x: &Leaves,
    result: AttentionOutput<B>,
    r_out: &[f32],
    r_lse: &[f32],
) -> Vec<Vec<f64>> {
    let device = Default::default();
    let d = case.dims;
    let unseen = Tensor::<B, 3, Bool>::from_data(
        TensorData::new(case.all_masked_rows(), [d.batch, d.heads, d.q_len]),
        &device,
    );
    let out = values(result.output.clone());
    let lse = values(result.lse.clone());
    let loss = (result.output * common::tensor::<B, 4>(r_out, case.q_shape(), &device)).sum()
        + (result.lse.mask_fill(unseen, 0.0)
            * common::tensor::<B, 3>(r_lse, [d.batch, d.heads, d.q_len], &device))
        .sum();
    let grads = loss.backward();
    let g4 =
        |t: &Tensor<B, 4>| values(t.grad(&grads).unwrap_or_else(|| panic!("missing gradient")));
    vec![
        out,
        lse,
        g4(&x.q),
        g4(&x.k),
        g4(&x.v),
        values(
            x.table
                .grad(&grads)
                .unwrap_or_else(|| panic!("missing table gradient")),
        ),
        g4(&x.dense),
    ]
}

/// The table gradient: each entry is a sum of `dS` entries (the dense bias's gradient) whose
/// terms can cancel, so a relative error against the sum itself measures only that
/// cancellation (with one bucket and one head, two f32 summation orders of the same ~3000
/// terms were 6e-4 apart). The error is bounded instead by `TOL` times the terms' total size
/// `sum |dS|`.
fn assert_table_close(what: &str, got: &[f64], want: &[f64], d_dense: &[f64], seed: u64) {
    let scale: f64 = d_dense
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| x.abs())
        .sum();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let error = (g - w).abs();
        assert!(
            error <= TOL * scale.max(1e-30),
            "{what}: entry {i} is {g}, whole range {w}: |difference| {error:.3e} > {TOL:.0e} x \
             sum |dS| = {scale:.3e} (seed {seed}, replay with MEGAGRAPH_TEST_SEED={seed})"
        );
    }
}

#[test]
fn merged_blocks_equal_whole_range_in_values_and_gradients() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("merged_blocks_equal_whole_range_in_values_and_gradients");
    for round in 0..4 {
        let k_len = rng.random_range(3..90);
        let column_offset = rng.random_range(0..8);
        let dims = Dims {
            batch: 3,
            heads: [1, 3, 8][round % 3],
            q_len: rng.random_range(1..25),
            k_len,
            head_dim: [8, 16, 64][rng.random_range(0..3)],
            buckets: rng.random_range(1..20),
            total_k_len: column_offset + k_len + rng.random_range(0..4),
            column_offset,
        };
        let features = Features {
            distance: true,
            dense: true,
            mask: true,
            all_masked_batch: true,
        };
        let mut case = Case::random(&mut rng, dims, features);
        // cut into three blocks; in batch 2 the first block is fully masked (its lse is -inf)
        let a = rng.random_range(1..k_len - 1);
        let b = rng.random_range(a + 1..k_len);
        if let Some(mask) = &mut case.mask {
            mask[2 * k_len..2 * k_len + a]
                .iter_mut()
                .for_each(|m| *m = true);
            mask[2 * k_len + a] = false;
        }
        let r_out = uniform(
            &mut rng,
            dims.batch * dims.heads * dims.q_len * dims.head_dim,
            1.0,
        );
        let r_lse = uniform(&mut rng, dims.batch * dims.heads * dims.q_len, 1.0);
        let block_size = rng.random_range(1..40);

        let whole = leaves(&case);
        let whole_result = block(&case, &whole, 0, k_len, block_size);
        let want = evaluate(&case, &whole, whole_result, &r_out, &r_lse);

        let split = leaves(&case);
        let parts = vec![
            block(&case, &split, 0, a, block_size),
            block(&case, &split, a, b, block_size),
            block(&case, &split, b, k_len, block_size),
        ];
        let merged = merge_partials(parts).unwrap_or_else(|e| panic!("{e}"));
        let got = evaluate(&case, &split, merged, &r_out, &r_lse);

        let names = ["output", "lse", "dq", "dk", "dv", "dtable", "ddense"];
        for ((name, g), w) in names.iter().zip(&got).zip(&want) {
            let what = format!("round {round} {dims:?} cuts {a},{b}: {name}");
            if *name == "dtable" {
                assert_table_close(&what, g, w, &want[6], seed);
            } else {
                assert_close(&what, g, w, TOL, seed);
            }
        }
    }
}

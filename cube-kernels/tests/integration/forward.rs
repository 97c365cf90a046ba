//! Forward pass against the float64 dense reference.

use crate::common;

use burn::backend::Flex;
use common::{Case, Dims, Features, assert_close, seeded_rng, values};
use megagraph_kernels::{AttentionOptions, graph_attention};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

type B = Flex;

const TOL: f64 = 1e-5;

fn random_dims(rng: &mut ChaCha8Rng, heads: usize, head_dim: usize) -> Dims {
    let k_len = rng.random_range(1..150);
    let column_offset = rng.random_range(0..20);
    Dims {
        batch: rng.random_range(1..3),
        heads,
        q_len: rng.random_range(1..40),
        k_len,
        head_dim,
        buckets: rng.random_range(1..40),
        total_k_len: column_offset + k_len + rng.random_range(0..10),
        column_offset,
    }
}

/// Runs the op on `case` and compares output and lse with the float64 reference.
fn check(case: &Case, block_size: usize, seed: u64, label: &str) {
    let device = Default::default();
    let q = common::tensor::<B, 4>(&case.q, case.q_shape(), &device);
    let k = common::tensor::<B, 4>(&case.k, case.kv_shape(), &device);
    let v = common::tensor::<B, 4>(&case.v, case.kv_shape(), &device);
    let options = AttentionOptions {
        scale: Some(case.scale),
        block_size,
    };
    let result = graph_attention(q, k, v, case.bias::<B>(&device), &options)
        .unwrap_or_else(|e| panic!("{label}: {e} (seed {seed})"));
    let (out_ref, lse_ref) = case.forward64(&case.inputs64());
    let label = format!("{label} dims {:?} block {block_size}", case.dims);
    assert_close(
        &format!("{label} output"),
        &values(result.output),
        &out_ref,
        TOL,
        seed,
    );
    assert_close(
        &format!("{label} lse"),
        &values(result.lse),
        &lse_ref,
        TOL,
        seed,
    );
}

#[test]
fn matches_dense_reference_over_heads_and_head_dims() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("matches_dense_reference_over_heads_and_head_dims");
    for heads in [1, 3, 8] {
        for head_dim in [8, 16, 64] {
            let dims = random_dims(&mut rng, heads, head_dim);
            let features = Features {
                distance: rng.random_bool(0.8),
                dense: rng.random_bool(0.5),
                mask: rng.random_bool(0.7),
                all_masked_batch: false,
            };
            let case = Case::random(&mut rng, dims, features);
            let block_size = [1, 7, 16, 32, 128][rng.random_range(0..5)];
            check(&case, block_size, seed, &format!("{features:?}"));
        }
    }
}

#[test]
fn q_len_differs_from_k_len_and_tiles_are_ragged() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("q_len_differs_from_k_len_and_tiles_are_ragged");
    let dims = Dims {
        batch: 2,
        heads: 3,
        q_len: 5,
        k_len: 131,
        head_dim: 16,
        buckets: 9,
        total_k_len: 200,
        column_offset: 61,
    };
    let features = Features {
        distance: true,
        dense: true,
        mask: true,
        all_masked_batch: false,
    };
    let case = Case::random(&mut rng, dims, features);
    for block_size in [1, 13, 64, 128, 131, 500] {
        check(&case, block_size, seed, "ragged");
    }
}

#[test]
fn all_masked_rows_give_zero_output_and_neg_inf_lse() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("all_masked_rows_give_zero_output_and_neg_inf_lse");
    let dims = Dims {
        batch: 3,
        heads: 2,
        q_len: 11,
        k_len: 37,
        head_dim: 8,
        buckets: 5,
        total_k_len: 40,
        column_offset: 3,
    };
    let features = Features {
        distance: true,
        dense: true,
        mask: true,
        all_masked_batch: true,
    };
    let case = Case::random(&mut rng, dims, features);
    assert!(case.row_all_masked(0));
    check(&case, 16, seed, "all-masked batch 0");

    // the masked rows are exactly zero / -inf, and nothing is NaN
    let device = Default::default();
    let q = common::tensor::<B, 4>(&case.q, case.q_shape(), &device);
    let k = common::tensor::<B, 4>(&case.k, case.kv_shape(), &device);
    let v = common::tensor::<B, 4>(&case.v, case.kv_shape(), &device);
    let result = graph_attention(
        q,
        k,
        v,
        case.bias::<B>(&device),
        &AttentionOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = values(result.output);
    let lse = values(result.lse);
    let per_batch_rows = dims.heads * dims.q_len;
    assert!(
        lse[..per_batch_rows]
            .iter()
            .all(|&l| l == f64::NEG_INFINITY)
    );
    assert!(
        out[..per_batch_rows * dims.head_dim]
            .iter()
            .all(|&o| o == 0.0)
    );
    assert!(
        lse[per_batch_rows..].iter().all(|l| l.is_finite()),
        "seed {seed}"
    );
    assert!(out.iter().all(|o| o.is_finite()), "seed {seed}");
}

#[test]
fn distance_index_is_u8_on_flex() {
    let _turn = crate::turn();
    let device = Default::default();
    let index = megagraph_kernels::DistanceBias::<B>::index_from_u8(
        vec![0, 1, 2, 3, 4, 5],
        [1, 2, 3],
        &device,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(index.dtype(), burn::tensor::DType::U8);
    let wrong = megagraph_kernels::DistanceBias::<B>::index_from_u8(vec![0; 5], [1, 2, 3], &device);
    assert!(matches!(
        wrong,
        Err(megagraph_kernels::AttentionError::IndexData(_))
    ));
}

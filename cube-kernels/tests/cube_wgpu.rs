//! The CubeCL kernels on wgpu (Mesa llvmpipe through OpenGL, no GPU needed) against the reference
//! implementation on Flex: outputs, log-sum-exp and gradients to 1e-5 (norm-wise relative error,
//! see `common`). Needs the `wgpu` feature and Mesa's EGL/GL libraries
//! (`apt-get install -y libegl1 libgl1-mesa-dri`).

#![cfg(feature = "wgpu")]

mod common;

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use common::tracked::{RunOptions, result_names, tracked_run};
use common::{Case, Dims, Features, assert_close, seeded_rng, uniform};
use megagraph_kernels::GraphAttentionBackend;

/// The kernels' backend: plain `CubeBackend` (no fusion) over wgpu.
type Wgpu = burn::backend::wgpu::CubeBackend<WgpuRuntime, f32, i32, u32>;

const TOL: f64 = 1e-5;

fn device() -> WgpuDevice {
    common::wgpu_device()
}

fn compare(case: &Case, seed: u64, rng: &mut rand_chacha::ChaCha8Rng, permuted: bool) {
    compare_with_block(case, seed, rng, permuted, 16);
}

fn compare_with_block(
    case: &Case,
    seed: u64,
    rng: &mut rand_chacha::ChaCha8Rng,
    permuted: bool,
    block_size: usize,
) {
    let d = case.dims;
    let r_out = uniform(rng, d.batch * d.heads * d.q_len * d.head_dim, 1.0);
    let r_lse = uniform(rng, d.batch * d.heads * d.q_len, 1.0);
    let flex = tracked_run::<Autodiff<Flex>>(
        case,
        &Default::default(),
        RunOptions::block(16),
        &r_out,
        &r_lse,
    );
    let options = RunOptions {
        permuted,
        ..RunOptions::block(block_size)
    };
    let wgpu = tracked_run::<Autodiff<Wgpu>>(case, &device(), options, &r_out, &r_lse);
    let names = result_names(case);
    assert_eq!(flex.len(), names.len());
    for ((name, w), f) in names.iter().zip(&wgpu).zip(&flex) {
        assert_close(&format!("wgpu vs flex {:?}: {name}", d), w, f, TOL, seed);
    }
}

#[test]
fn wgpu_kernels_match_flex_reference() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("wgpu_kernels_match_flex_reference");
    // everything: distance, dense, padding, a fully masked batch element, column offset
    let all = Case::random(
        &mut rng,
        Dims {
            batch: 2,
            heads: 3,
            q_len: 13,
            k_len: 37,
            head_dim: 8,
            buckets: 6,
            total_k_len: 45,
            column_offset: 5,
        },
        Features {
            distance: true,
            dense: true,
            mask: true,
            all_masked_batch: true,
        },
    );
    compare(&all, seed, &mut rng, false);
    // distance bias only, queries as a permuted (non-contiguous) view
    let distance_only = Case::random(
        &mut rng,
        Dims {
            batch: 1,
            heads: 2,
            q_len: 20,
            k_len: 9,
            head_dim: 16,
            buckets: 4,
            total_k_len: 9,
            column_offset: 0,
        },
        Features {
            distance: true,
            dense: false,
            mask: false,
            all_masked_batch: false,
        },
    );
    compare(&distance_only, seed, &mut rng, true);
}

/// Every specialized head_dim (and a generic one), over several query and key tiles with ragged
/// tails, each with another mix of features.
#[test]
fn wgpu_kernels_match_flex_reference_per_head_dim() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("wgpu_kernels_match_flex_reference_per_head_dim");
    let cases = [
        // head_dim, q_len, k_len, column offset, distance, dense, mask, all-masked batch
        (8, 70, 45, 3, true, false, true, true),
        (16, 33, 65, 0, true, true, false, false),
        (32, 40, 31, 9, true, false, true, false),
        (64, 65, 50, 1, false, true, true, true),
        (128, 34, 40, 2, true, true, true, false),
        (12, 37, 19, 0, true, false, false, false),
    ];
    for (head_dim, q_len, k_len, column_offset, distance, dense, mask, all_masked) in cases {
        let case = Case::random(
            &mut rng,
            Dims {
                batch: 2,
                heads: 2,
                q_len,
                k_len,
                head_dim,
                buckets: 7,
                total_k_len: k_len + column_offset + 2,
                column_offset,
            },
            Features {
                distance,
                dense,
                mask,
                all_masked_batch: all_masked,
            },
        );
        compare(&case, seed, &mut rng, false);
    }
}

/// Many buckets (more than the 32 units of a cube, so the table gradient is reduced in several
/// chunks) and a block size that picks the smallest key tile.
#[test]
fn wgpu_table_gradient_with_many_buckets() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("wgpu_table_gradient_with_many_buckets");
    let case = Case::random(
        &mut rng,
        Dims {
            batch: 3,
            heads: 2,
            q_len: 41,
            k_len: 77,
            head_dim: 16,
            buckets: 200,
            total_k_len: 77,
            column_offset: 0,
        },
        Features {
            distance: true,
            dense: false,
            mask: true,
            all_masked_batch: false,
        },
    );
    compare_with_block(&case, seed, &mut rng, false, 5);
}

/// All keys of every batch element masked: zero outputs and gradients, `-inf` lse, no NaN.
#[test]
fn wgpu_all_masked_rows_give_no_nan() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("wgpu_all_masked_rows_give_no_nan");
    let mut case = Case::random(
        &mut rng,
        Dims {
            batch: 1,
            heads: 2,
            q_len: 35,
            k_len: 20,
            head_dim: 8,
            buckets: 3,
            total_k_len: 20,
            column_offset: 0,
        },
        Features {
            distance: true,
            dense: true,
            mask: true,
            all_masked_batch: true,
        },
    );
    if let Some(mask) = &mut case.mask {
        mask.iter_mut().for_each(|m| *m = true);
    }
    compare(&case, seed, &mut rng, false);
    let d = case.dims;
    let r_out = uniform(&mut rng, d.batch * d.heads * d.q_len * d.head_dim, 1.0);
    let r_lse = uniform(&mut rng, d.batch * d.heads * d.q_len, 1.0);
    let found =
        tracked_run::<Autodiff<Wgpu>>(&case, &device(), RunOptions::block(16), &r_out, &r_lse);
    for (n, values) in found.iter().enumerate() {
        assert!(values.iter().all(|x| !x.is_nan()), "NaN in result {n}");
    }
    assert!(found[1].iter().all(|x| *x == f64::NEG_INFINITY), "lse of masked rows");
}

/// A sparse index, expanded on the device per key block, gives what the same index dense gives,
/// bit for bit, and matches the reference: two batch elements (offsets running over the batch),
/// a column offset and a key block narrower than the index.
#[test]
fn wgpu_sparse_index_matches_dense() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("wgpu_sparse_index_matches_dense");
    let case = Case::random(
        &mut rng,
        Dims {
            batch: 2,
            heads: 2,
            q_len: 70,
            k_len: 41,
            head_dim: 8,
            buckets: 5,
            total_k_len: 53,
            column_offset: 7,
        },
        Features {
            distance: true,
            dense: false,
            mask: true,
            all_masked_batch: false,
        },
    );
    let d = case.dims;
    let r_out = uniform(&mut rng, d.batch * d.heads * d.q_len * d.head_dim, 1.0);
    let r_lse = uniform(&mut rng, d.batch * d.heads * d.q_len, 1.0);
    let run = |sparse: bool| {
        let options = RunOptions {
            sparse,
            ..RunOptions::block(16)
        };
        tracked_run::<Autodiff<Wgpu>>(&case, &device(), options, &r_out, &r_lse)
    };
    let (dense, sparse) = (run(false), run(true));
    let flex = tracked_run::<Autodiff<Flex>>(
        &case,
        &Default::default(),
        RunOptions::block(16),
        &r_out,
        &r_lse,
    );
    for (((name, s), x), f) in result_names(&case).iter().zip(&sparse).zip(&dense).zip(&flex) {
        assert_eq!(s, x, "sparse vs dense index on wgpu: {name} (seed {seed})");
        assert_close(&format!("sparse wgpu vs flex: {name}"), s, f, TOL, seed);
    }
}

#[test]
fn wgpu_index_dtype_is_supported() {
    let _turn = common::wgpu_turn();
    let device = device();
    let index = megagraph_kernels::DistanceBias::<Wgpu>::index_from_u8(
        vec![1, 2, 3, 4],
        [1, 2, 2],
        &device,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dtype = index.dtype();
    assert!(
        <Wgpu as Backend>::supports_dtype(&device, dtype),
        "index dtype {dtype:?}"
    );
    let back: Vec<i64> = index.into_data().iter::<i64>().collect();
    assert_eq!(back, vec![1, 2, 3, 4]);
}

#[test]
fn burn_wgpu_alias_is_a_graph_attention_backend() {
    let _turn = common::wgpu_turn();
    // With Burn's default features `burn::backend::Wgpu` is `Fusion<CubeBackend>`, which runs the
    // kernels of its inner `CubeBackend` (tests/fusion_wgpu.rs); the plain `CubeBackend` (the
    // `Wgpu` alias above) launches them directly.
    fn backend_name<B: GraphAttentionBackend>() -> &'static str {
        core::any::type_name::<B>()
    }
    assert!(backend_name::<burn::backend::Wgpu>().contains("CubeBackend"));
    assert!(backend_name::<Wgpu>().starts_with("burn_cubecl"), "{}", backend_name::<Wgpu>());
}

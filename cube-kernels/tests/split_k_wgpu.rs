//! Split-K of the CubeCL forward pass on wgpu (Mesa llvmpipe through OpenGL, no GPU needed):
//! with the keys split over several cubes and merged by log-sum-exp, and without a split, the
//! output and log-sum-exp match the float64 reference to 1e-5 (norm-wise relative error, see
//! `common`): masks, chunks whose keys are all masked, rows without a visible key (no NaN),
//! sizes that are not tile multiples.
//!
//! The split target is process-wide, so this file holds one test that sets it in turn. The other
//! wgpu tests (cube_wgpu, fusion_wgpu) run below the default target, so their forward passes are
//! split too and their gradient checks run the backward kernels on a merged log-sum-exp.

#![cfg(feature = "wgpu")]

mod common;

use common::{Case, Dims, Features, assert_close, seeded_rng, values};
use megagraph_kernels::backends::{
    DEFAULT_SPLIT_K_TARGET_CUBES, WgpuKernels, set_split_k_target_cubes,
};
use megagraph_kernels::{AttentionOptions, graph_attention};

const TOL: f64 = 1e-5;

/// Output and log-sum-exp of `case` on the plain kernels' backend.
fn forward(case: &Case, block_size: usize) -> (Vec<f64>, Vec<f64>) {
    let device = common::wgpu_device();
    let tensor = |x: &[f32], shape| common::tensor::<WgpuKernels, 4>(x, shape, &device);
    let options = AttentionOptions {
        scale: Some(case.scale),
        block_size,
    };
    let result = graph_attention(
        tensor(&case.q, case.q_shape()),
        tensor(&case.k, case.kv_shape()),
        tensor(&case.v, case.kv_shape()),
        case.bias::<WgpuKernels>(&device),
        &options,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (values(result.output), values(result.lse))
}

#[test]
fn split_k_forward_matches_float64() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("split_k_forward_matches_float64");
    let cases = [
        // batch, heads, q_len, k_len, head_dim, column offset, dense, all-masked batch
        (1, 2, 5, 45, 8, 3, false, false),
        (2, 1, 33, 70, 16, 0, true, true),
        (1, 3, 1, 200, 64, 7, true, false),
        (2, 2, 17, 9, 32, 1, false, false),
    ];
    for (batch, heads, q_len, k_len, head_dim, column_offset, dense, all_masked) in cases {
        let mut case = Case::random(
            &mut rng,
            Dims {
                batch,
                heads,
                q_len,
                k_len,
                head_dim,
                buckets: 6,
                total_k_len: k_len + column_offset + 2,
                column_offset,
            },
            Features {
                distance: true,
                dense,
                mask: true,
                all_masked_batch: all_masked,
            },
        );
        // the first 16 keys of the last batch element masked: whole chunks without a visible key
        if let Some(mask) = &mut case.mask {
            let last = (batch - 1) * k_len;
            mask[last..last + k_len.min(16)].fill(true);
        }
        let (out_ref, lse_ref) = case.forward64(&case.inputs64());
        // key tiles of 8 keys: 1 turns split-K off, 4 splits in two, 1 << 20 in one tile each
        for target in [1, 4, 1 << 20] {
            set_split_k_target_cubes(target);
            let (out, lse) = forward(&case, 8);
            let what = format!("{:?} split-K target {target}", case.dims);
            assert!(
                out.iter().all(|x| x.is_finite()),
                "{what}: output not finite"
            );
            assert!(lse.iter().all(|x| !x.is_nan()), "{what}: NaN lse");
            assert_close(&format!("{what} output"), &out, &out_ref, TOL, seed);
            assert_close(&format!("{what} lse"), &lse, &lse_ref, TOL, seed);
        }
    }
    set_split_k_target_cubes(DEFAULT_SPLIT_K_TARGET_CUBES);
}

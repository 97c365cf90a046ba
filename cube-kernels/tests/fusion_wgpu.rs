//! The op on Burn's public `Wgpu` type (`Fusion<CubeBackend>`, Burn's default `fusion` feature)
//! runs the CubeCL kernels: its outputs, log-sum-exp and gradients are bitwise those of the plain
//! `CubeBackend` (which the reference implementation, fused by the fusion runtime, does not
//! reproduce; checked too), and agree with the reference on Flex to 1e-5. Dense and sparse
//! distance indexes, with and without the optional inputs. On Mesa llvmpipe through OpenGL, no
//! GPU needed (`apt-get install -y libegl1 libgl1-mesa-dri`).

#![cfg(feature = "wgpu")]

mod common;

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Flex};
use burn::tensor::Tensor;
use common::tracked::{RunOptions, result_names, tracked_run};
use common::{Case, Dims, Features, assert_close, seeded_rng, uniform, values};
use megagraph_kernels::backends::WgpuKernels;
use megagraph_kernels::{
    AttentionOptions, DistanceBiasPrimitive, GraphAttentionInputs, graph_attention, reference,
};
use rand_chacha::ChaCha8Rng;

/// Burn's public `Wgpu` type: `Fusion<CubeBackend<WgpuRuntime, f32, i32, u32>>`.
type Fused = burn::backend::Wgpu;

const TOL: f64 = 1e-5;
const BLOCK_SIZE: usize = 16;

fn device() -> WgpuDevice {
    common::wgpu_device()
}

/// Runs `case` on `Autodiff<Wgpu>` (fused), `Autodiff<WgpuKernels>` (plain) and
/// `Autodiff<Flex>` (reference): fused and plain agree bitwise, fused and Flex to [`TOL`]. Returns
/// the fused output.
fn compare(case: &Case, sparse: bool, seed: u64, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let d = case.dims;
    let r_out = uniform(rng, d.batch * d.heads * d.q_len * d.head_dim, 1.0);
    let r_lse = uniform(rng, d.batch * d.heads * d.q_len, 1.0);
    let options = RunOptions {
        sparse,
        ..RunOptions::block(BLOCK_SIZE)
    };
    let mut fused = tracked_run::<Autodiff<Fused>>(case, &device(), options, &r_out, &r_lse);
    let plain = tracked_run::<Autodiff<WgpuKernels>>(case, &device(), options, &r_out, &r_lse);
    let flex = tracked_run::<Autodiff<Flex>>(case, &Default::default(), options, &r_out, &r_lse);
    let names = result_names(case);
    assert_eq!(fused.len(), names.len());
    for (((name, f), p), r) in names.iter().zip(&fused).zip(&plain).zip(&flex) {
        let what = format!("{d:?} sparse {sparse}: {name}");
        assert!(
            f == p,
            "{what}: fused Wgpu differs from the plain kernels (seed {seed})"
        );
        assert_close(&format!("fused wgpu vs flex {what}"), f, r, TOL, seed);
    }
    fused.swap_remove(0)
}

/// The reference implementation's output for `case` on the fused backend (no autodiff).
fn fused_reference_output(case: &Case, sparse: bool) -> Vec<f64> {
    let device = device();
    let tensor = |values: &[f32], shape| common::tensor::<Fused, 4>(values, shape, &device);
    let bias = case.bias_with::<Fused>(&device, sparse);
    let inputs = GraphAttentionInputs::<Fused> {
        q: tensor(&case.q, case.q_shape()).into_primitive().tensor(),
        k: tensor(&case.k, case.kv_shape()).into_primitive().tensor(),
        v: tensor(&case.v, case.kv_shape()).into_primitive().tensor(),
        distance: bias.distance.map(|d| DistanceBiasPrimitive {
            index: d.index.into_primitive(),
            table: d.table.into_primitive().tensor(),
            column_offset: d.column_offset,
        }),
        dense: bias.dense.map(|t| t.into_primitive().tensor()),
        key_padding_mask: bias.key_padding_mask.map(Tensor::into_primitive),
        scale: case.scale,
        block_size: BLOCK_SIZE,
    };
    let packed = Tensor::<Fused, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(
        reference::forward::<Fused>(inputs),
    ));
    let d = case.dims;
    values(packed.slice([0..d.batch, 0..d.heads, 0..d.q_len, 0..d.head_dim]))
}

fn case(rng: &mut ChaCha8Rng, features: Features) -> Case {
    Case::random(
        rng,
        Dims {
            batch: 2,
            heads: 3,
            q_len: 37,
            k_len: 45,
            head_dim: 16,
            buckets: 6,
            total_k_len: 52,
            column_offset: 4,
        },
        features,
    )
}

#[test]
fn fused_wgpu_runs_the_kernels_with_every_input() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("fused_wgpu_runs_the_kernels_with_every_input");
    let all = Features {
        distance: true,
        dense: true,
        mask: true,
        all_masked_batch: false,
    };
    let case = case(&mut rng, all);
    for sparse in [false, true] {
        let output = compare(&case, sparse, seed, &mut rng);
        // The bitwise match above tells the kernels from the reference: the reference, fused by
        // the fusion runtime, rounds otherwise.
        let reference = fused_reference_output(&case, sparse);
        assert_close("fused reference vs kernels", &reference, &output, TOL, seed);
        assert!(
            reference != output,
            "the fused reference reproduces the kernels bitwise: the test cannot tell them apart \
             (seed {seed})"
        );
    }
}

#[test]
fn fused_wgpu_runs_the_kernels_without_optional_inputs() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("fused_wgpu_runs_the_kernels_without_optional_inputs");
    let features = |distance, dense, mask, all_masked_batch| Features {
        distance,
        dense,
        mask,
        all_masked_batch,
    };
    // nothing but q, k, v; distance only (dense and sparse); dense bias and a fully masked
    // batch element
    compare(
        &case(&mut rng, features(false, false, false, false)),
        false,
        seed,
        &mut rng,
    );
    let distance_only = case(&mut rng, features(true, false, false, false));
    compare(&distance_only, false, seed, &mut rng);
    compare(&distance_only, true, seed, &mut rng);
    compare(
        &case(&mut rng, features(false, true, true, true)),
        false,
        seed,
        &mut rng,
    );
}

/// One tensor as `q`, `k` and `v`: the fusion stream hands the same handle three times (read-only
/// twice, then read-write).
#[test]
fn fused_wgpu_takes_one_tensor_as_several_inputs() {
    let _turn = common::wgpu_turn();
    let (mut rng, seed) = seeded_rng("fused_wgpu_takes_one_tensor_as_several_inputs");
    let shape = [1, 2, 29, 8];
    let x = uniform(&mut rng, shape.iter().product(), 1.0);
    let options = AttentionOptions::default();
    let fused = common::tensor::<Fused, 4>(&x, shape, &device());
    let fused = graph_attention(
        fused.clone(),
        fused.clone(),
        fused,
        Default::default(),
        &options,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let plain = common::tensor::<WgpuKernels, 4>(&x, shape, &device());
    let plain = graph_attention(
        plain.clone(),
        plain.clone(),
        plain,
        Default::default(),
        &options,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        values(fused.output) == values(plain.output),
        "output (seed {seed})"
    );
    assert!(values(fused.lse) == values(plain.lse), "lse (seed {seed})");
}

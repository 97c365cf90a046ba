//! `f16` and `bf16` inputs on Flex: the fused CPU path (through `Autodiff<Flex>`) and the
//! reference op (at the primitive level) against the float64 reference, and the typed error for
//! mixed dtypes.
//!
//! The inputs are random values rounded to the half type, and the float64 reference reads the
//! rounded values, so the only errors are the op's: its `f32` arithmetic (within `F32_TOL`, the
//! tolerance of the `f32` tests in `fused_cpu.rs`) and the final rounding of each half-precision
//! result to its dtype (at most the unit roundoff `u = ε / 2` relative, entry by entry: `2⁻¹¹`
//! for `f16`, `2⁻⁸` for `bf16`). The bound on a half result's norm-wise relative error is
//! therefore `u + F32_TOL` (for the table gradient, relative to the scale of its summed terms,
//! which bounds the reference entry by entry). The log-sum-exp stays `f32` and is held to
//! `F32_TOL` alone. Accumulating in the half type would miss these bounds by a wide margin (each
//! sum over keys would add rounding errors of order `u` per term).

use crate::common;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use common::tracked::{RunOptions, tracked_run};
use common::{Case, Dims, Features, assert_close, assert_close_to_scale, seeded_rng, uniform};
use megagraph_kernels::{
    AttentionBias, AttentionError, AttentionOptions, DistanceBiasPrimitive, GraphAttentionInputs, compute_dtype,
    graph_attention, reference,
};
use rand_chacha::ChaCha8Rng;

type B = Flex;
type A = Autodiff<Flex>;

/// Tolerance of the `f32` computation (that of the `f32` tests in `fused_cpu.rs`).
const F32_TOL: f64 = 1e-5;

/// The unit roundoff of a half type: half its machine epsilon.
fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        other => panic!("not a half type: {other:?}"),
    }
}

/// `values` rounded to `dtype` (exactly representable in `f32` again).
fn rounded(values: &[f32], dtype: DType) -> Vec<f32> {
    let t = Tensor::<B, 1>::from_data(TensorData::new(values.to_vec(), [values.len()]), &Default::default());
    t.cast(dtype).into_data().iter::<f32>().collect()
}

/// `case` with every float input rounded to `dtype`.
fn rounded_case(case: &Case, dtype: DType) -> Case {
    Case {
        q: rounded(&case.q, dtype),
        k: rounded(&case.k, dtype),
        v: rounded(&case.v, dtype),
        table: rounded(&case.table, dtype),
        dense: case.dense.as_deref().map(|d| rounded(d, dtype)),
        ..case.clone()
    }
}

/// The cases: head_dim 8 and 64, lengths that are not tile multiples, a column offset, a mask
/// with one batch element masked entirely, a dense bias in one of them.
fn cases(rng: &mut ChaCha8Rng) -> Vec<Case> {
    let shapes = [(8, 70, 150, 3, false), (64, 33, 97, 0, true), (8, 129, 64, 5, false)];
    shapes
        .into_iter()
        .map(|(head_dim, q_len, k_len, column_offset, dense)| {
            let dims = Dims {
                batch: 2,
                heads: 2,
                q_len,
                k_len,
                head_dim,
                buckets: 6,
                total_k_len: column_offset + k_len + 2,
                column_offset,
            };
            let features = Features {
                distance: true,
                dense,
                mask: true,
                all_masked_batch: true,
            };
            Case::random(rng, dims, features)
        })
        .collect()
}

/// Upstream gradients: `dO` rounded to `dtype` (the output's dtype), `dLSE` in `f32` and zero on
/// rows without a visible key.
fn upstream(rng: &mut ChaCha8Rng, case: &Case, dtype: DType) -> (Vec<f32>, Vec<f32>) {
    let d = case.dims;
    let rows = d.batch * d.heads * d.q_len;
    let d_out = rounded(&uniform(rng, rows * d.head_dim, 1.0), dtype);
    let d_lse = uniform(rng, rows, 1.0)
        .into_iter()
        .zip(case.all_masked_rows())
        .map(|(g, masked)| if masked { 0.0 } else { g })
        .collect();
    (d_out, d_lse)
}

fn to64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

#[test]
fn half_inputs_on_the_fused_cpu_path_match_float64() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("half_inputs_on_the_fused_cpu_path_match_float64");
    for dtype in [DType::F16, DType::BF16] {
        let half_tol = unit_roundoff(dtype) + F32_TOL;
        // the largest error of a half result, in units of the unit roundoff
        let mut worst = 0.0f64;
        for case in cases(&mut rng) {
            let case = rounded_case(&case, dtype);
            let (d_out, d_lse) = upstream(&mut rng, &case, dtype);
            for sparse in [false, true] {
                let options = RunOptions {
                    sparse,
                    dtype,
                    ..RunOptions::block(64)
                };
                let found = tracked_run::<A>(&case, &Default::default(), options, &d_out, &d_lse);
                let x = case.inputs64();
                let (out, lse) = case.forward64(&x);
                let want = case.backward64(&x, &to64(&d_out), &to64(&d_lse));
                let label = |what: &str| format!("{dtype:?} {:?} sparse {sparse}: {what}", case.dims);
                let checks = [
                    ("output", &found[0], &out, None),
                    ("dq", &found[2], &want.q, None),
                    ("dk", &found[3], &want.k, None),
                    ("dv", &found[4], &want.v, None),
                    ("dtable", &found[5], &want.table, Some(&want.table_scale)),
                ];
                let dense = want.dense.as_ref().map(|dense| ("ddense", &found[6], dense, None));
                for (what, found, want, scale) in checks.into_iter().chain(dense) {
                    let err = match scale {
                        Some(scale) => common::rel_err_to_scale(found, want, scale),
                        None => common::rel_err(found, want),
                    };
                    let err = err.unwrap_or_else(|msg| panic!("{}: {msg} (seed {seed})", label(what)));
                    worst = worst.max(err / unit_roundoff(dtype));
                    assert!(
                        err <= half_tol,
                        "{}: error {err:.3e} > {half_tol:.3e} (seed {seed})",
                        label(what)
                    );
                }
                assert_close(&label("lse (f32)"), &found[1], &lse, F32_TOL, seed);
            }
        }
        println!("{dtype:?}: largest norm-wise relative error of a half result {worst:.3} u (bound 1 u + {F32_TOL:e})");
    }
}

/// A float primitive of `dtype` from `f32` values.
fn half<const D: usize>(values: &[f32], shape: [usize; D], dtype: DType) -> burn::tensor::ops::FloatTensor<B> {
    common::tensor::<B, D>(values, shape, &Default::default())
        .cast(dtype)
        .into_primitive()
        .tensor()
}

fn primitive_values<const D: usize>(t: burn::tensor::ops::FloatTensor<B>) -> Vec<f64> {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .iter::<f64>()
        .collect()
}

fn dtype_of<const D: usize>(t: &burn::tensor::ops::FloatTensor<B>) -> DType {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t.clone())).dtype()
}

#[test]
fn half_inputs_on_the_reference_op_match_float64() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("half_inputs_on_the_reference_op_match_float64");
    for dtype in [DType::F16, DType::BF16] {
        let half_tol = unit_roundoff(dtype) + F32_TOL;
        for case in cases(&mut rng) {
            let case = rounded_case(&case, dtype);
            let d = case.dims;
            let bias = case.bias::<B>(&Default::default());
            let inputs = GraphAttentionInputs::<B> {
                q: half(&case.q, case.q_shape(), dtype),
                k: half(&case.k, case.kv_shape(), dtype),
                v: half(&case.v, case.kv_shape(), dtype),
                distance: bias.distance.map(|dist| DistanceBiasPrimitive {
                    index: dist.index.into_primitive(),
                    table: dist.table.cast(dtype).into_primitive().tensor(),
                    column_offset: dist.column_offset,
                }),
                dense: bias.dense.map(|t| t.cast(dtype).into_primitive().tensor()),
                key_padding_mask: bias.key_padding_mask.map(|m| m.into_primitive()),
                scale: case.scale,
                block_size: 64,
            };
            let packed = reference::forward::<B>(inputs.clone());
            assert_eq!(dtype_of::<4>(&packed), compute_dtype(dtype), "packed result's dtype");
            let (out, lse): (Vec<f64>, Vec<f64>) = {
                let all = primitive_values::<4>(packed.clone());
                let rows = all.chunks(d.head_dim + 1);
                (
                    rows.clone().flat_map(|r| r[..d.head_dim].to_vec()).collect(),
                    rows.map(|r| r[d.head_dim]).collect(),
                )
            };
            let x = case.inputs64();
            let (out_ref, lse_ref) = case.forward64(&x);
            let label = |what: &str| format!("reference {dtype:?} {d:?}: {what}");
            // the packed result is f32: the f32 tolerance holds for the output as well
            assert_close(&label("output"), &out, &out_ref, F32_TOL, seed);
            assert_close(&label("lse"), &lse, &lse_ref, F32_TOL, seed);

            let (d_out, d_lse) = upstream(&mut rng, &case, dtype);
            let mut grad = Vec::new();
            for (row, g) in d_out.chunks(d.head_dim).zip(&d_lse) {
                grad.extend_from_slice(row);
                grad.push(*g);
            }
            let grad = half(&grad, [d.batch, d.heads, d.q_len, d.head_dim + 1], DType::F32);
            let grads = reference::backward::<B>(inputs, packed, grad);
            let want = case.backward64(&x, &to64(&d_out), &to64(&d_lse));
            for (what, g) in [("dq", &grads.q), ("dk", &grads.k), ("dv", &grads.v)] {
                assert_eq!(dtype_of::<4>(g), dtype, "{}", label(what));
            }
            let table = grads.table.unwrap_or_else(|| panic!("{}", label("no table gradient")));
            assert_eq!(dtype_of::<2>(&table), dtype, "{}", label("dtable"));
            assert_close(&label("dq"), &primitive_values::<4>(grads.q), &want.q, half_tol, seed);
            assert_close(&label("dk"), &primitive_values::<4>(grads.k), &want.k, half_tol, seed);
            assert_close(&label("dv"), &primitive_values::<4>(grads.v), &want.v, half_tol, seed);
            let table = primitive_values::<2>(table);
            assert_close_to_scale(&label("dtable"), &table, &want.table, &want.table_scale, half_tol, seed);
            if let (Some(g), Some(w)) = (grads.dense, &want.dense) {
                assert_close(&label("ddense"), &primitive_values::<4>(g), w, half_tol, seed);
            }
        }
    }
}

/// The op without a bias, with default options.
fn unbiased<Bk: megagraph_kernels::GraphAttentionBackend>(
    q: Tensor<Bk, 4>,
    k: Tensor<Bk, 4>,
    v: Tensor<Bk, 4>,
) -> Result<megagraph_kernels::AttentionOutput<Bk>, AttentionError> {
    graph_attention(q, k, v, AttentionBias::default(), &AttentionOptions::default())
}

#[test]
fn half_inputs_give_half_output_f32_lse_and_half_gradients() {
    let _turn = crate::turn();
    let device = Default::default();
    for dtype in [DType::F16, DType::BF16] {
        let leaf = |shape: [usize; 4], fill: f32| Tensor::<A, 4>::full(shape, fill, &device).cast(dtype).require_grad();
        let (q, k, v) = (
            leaf([1, 2, 5, 8], 0.5),
            leaf([1, 2, 7, 8], -0.25),
            leaf([1, 2, 7, 8], 1.0),
        );
        let result = unbiased(q.clone(), k.clone(), v.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(result.output.dtype(), dtype);
        assert_eq!(result.lse.dtype(), DType::F32);
        let loss = result.output.sum().cast(DType::F32) + result.lse.sum();
        let grads = loss.backward();
        for (name, t) in [("q", &q), ("k", &k), ("v", &v)] {
            let g = t.grad(&grads).unwrap_or_else(|| panic!("no gradient of {name}"));
            assert_eq!(g.dtype(), dtype, "gradient of {name}");
        }
    }
}

#[test]
fn mixed_dtypes_are_a_typed_error_naming_the_tensor() {
    let _turn = crate::turn();
    let device = Default::default();
    let q = Tensor::<B, 4>::ones([1, 1, 3, 4], &device).cast(DType::F16);
    let k = Tensor::<B, 4>::ones([1, 1, 3, 4], &device);
    let err = unbiased(q.clone(), k.clone(), q.clone()).err();
    assert_eq!(
        err,
        Some(AttentionError::DTypeMismatch {
            tensor: "k",
            expected: DType::F16,
            actual: DType::F32,
        })
    );
    let err = unbiased(k.clone(), k.clone(), k.clone().cast(DType::BF16)).err();
    assert!(matches!(
        err,
        Some(AttentionError::DTypeMismatch {
            tensor: "v",
            expected: DType::F32,
            actual: DType::BF16,
        })
    ));
    let index = megagraph_kernels::DistanceBias::<B>::index_from_u8(vec![0; 9], [1, 3, 3], &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let bias = AttentionBias {
        distance: Some(megagraph_kernels::DistanceBias {
            index: index.into(),
            table: Tensor::<B, 2>::zeros([2, 1], &device).cast(DType::BF16),
            column_offset: 0,
        }),
        dense: None,
        key_padding_mask: None,
    };
    let err = graph_attention(k.clone(), k.clone(), k, bias, &AttentionOptions::default()).err();
    assert!(matches!(
        err,
        Some(AttentionError::DTypeMismatch {
            tensor: "bias.distance.table",
            expected: DType::F32,
            actual: DType::BF16,
        })
    ));
}

/// The CubeCL kernels on wgpu (llvmpipe through OpenGL) with half inputs, against float64 with the
/// bounds of the CPU path; skipped, saying why, for a half type the adapter does not support.
#[cfg(feature = "wgpu")]
#[test]
fn half_inputs_on_the_wgpu_kernels_match_float64() {
    let _turn = crate::turn();
    use burn::tensor::backend::Backend;
    type W = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
    let device = common::wgpu_device();
    let (mut rng, seed) = seeded_rng("half_inputs_on_the_wgpu_kernels_match_float64");
    for dtype in [DType::F16, DType::BF16] {
        if !W::supports_dtype(&device, dtype) {
            println!(
                "SKIPPED {dtype:?} on wgpu: the adapter ({device:?}) reports no {dtype:?} support (`supports_dtype`)"
            );
            continue;
        }
        let half_tol = unit_roundoff(dtype) + F32_TOL;
        for case in cases(&mut rng) {
            let case = rounded_case(&case, dtype);
            let (d_out, d_lse) = upstream(&mut rng, &case, dtype);
            let options = RunOptions {
                dtype,
                ..RunOptions::block(16)
            };
            let found = tracked_run::<Autodiff<W>>(&case, &device, options, &d_out, &d_lse);
            let x = case.inputs64();
            let (out, lse) = case.forward64(&x);
            let want = case.backward64(&x, &to64(&d_out), &to64(&d_lse));
            let label = |what: &str| format!("wgpu {dtype:?} {:?}: {what}", case.dims);
            assert_close(&label("output"), &found[0], &out, half_tol, seed);
            assert_close(&label("lse (f32)"), &found[1], &lse, F32_TOL, seed);
            for (what, found, want) in [
                ("dq", &found[2], &want.q),
                ("dk", &found[3], &want.k),
                ("dv", &found[4], &want.v),
            ] {
                assert_close(&label(what), found, want, half_tol, seed);
            }
        }
    }
}

//! Flex runs the op through its fused CPU path; `megagraph_kernels::reference` runs it with Burn
//! tensor ops. Both against the float64 dense reference, with dense and sparse distance indexes, directly at the primitive level, on
//! sizes with several query tiles, several key tiles and several tasks per (batch, head).

use crate::common;

use burn::backend::Flex;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use common::{
    Case, Dims, Features, assert_close, assert_close_to_scale, seeded_rng, uniform,
};
use megagraph_kernels::{
    DistanceBiasPrimitive, GraphAttentionBackend, GraphAttentionGrads, GraphAttentionInputs,
    reference,
};
use rand::Rng;

type B = Flex;

const TOL: f64 = 1e-5;

/// A forward pass of the op: the fused path's or the reference's.
type Forward = fn(GraphAttentionInputs<B>) -> FloatTensor<B>;

/// A backward pass of the op: the fused path's or the reference's.
type Backward =
    fn(GraphAttentionInputs<B>, FloatTensor<B>, FloatTensor<B>) -> GraphAttentionGrads<B>;

fn float<const D: usize>(values: &[f32], shape: [usize; D]) -> FloatTensor<B> {
    common::tensor::<B, D>(values, shape, &Default::default())
        .into_primitive()
        .tensor()
}

fn inputs(case: &Case, block_size: usize, sparse: bool) -> GraphAttentionInputs<B> {
    let bias = case.bias_with::<B>(&Default::default(), sparse);
    GraphAttentionInputs {
        q: float(&case.q, case.q_shape()),
        k: float(&case.k, case.kv_shape()),
        v: float(&case.v, case.kv_shape()),
        distance: bias.distance.map(|d| DistanceBiasPrimitive {
            index: d.index.into_primitive(),
            table: d.table.into_primitive().tensor(),
            column_offset: d.column_offset,
        }),
        dense: bias.dense.map(|d| d.into_primitive().tensor()),
        key_padding_mask: bias.key_padding_mask.map(|m| m.into_primitive()),
        scale: case.scale,
        block_size,
    }
}

fn values<const D: usize>(t: FloatTensor<B>) -> Vec<f64> {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .iter::<f64>()
        .collect()
}

/// The forward result split into output and lse.
fn split(case: &Case, packed: Vec<f64>) -> (Vec<f64>, Vec<f64>) {
    let dh = case.dims.head_dim;
    let (mut out, mut lse) = (Vec::new(), Vec::new());
    for row in packed.chunks(dh + 1) {
        out.extend_from_slice(&row[..dh]);
        lse.push(row[dh]);
    }
    (out, lse)
}

/// Checks one implementation's forward and backward against float64.
#[allow(clippy::too_many_arguments)] // the case, the implementation and its settings
fn check(
    case: &Case,
    label: &str,
    seed: u64,
    forward: Forward,
    backward: Backward,
    block_size: usize,
    sparse: bool,
    rng: &mut rand_chacha::ChaCha8Rng,
) {
    let d = case.dims;
    let x = case.inputs64();
    let packed = forward(inputs(case, block_size, sparse));
    let (out, lse) = split(case, values::<4>(packed.clone()));
    let (out_ref, lse_ref) = case.forward64(&x);
    assert_close(&format!("{label} output"), &out, &out_ref, TOL, seed);
    assert_close(&format!("{label} lse"), &lse, &lse_ref, TOL, seed);

    // upstream gradient: dO random, dLSE random on rows with a visible key
    let rows = d.batch * d.heads * d.q_len;
    let d_out = uniform(rng, rows * d.head_dim, 1.0);
    let unseen = case.all_masked_rows();
    let d_lse: Vec<f32> = uniform(rng, rows, 1.0)
        .into_iter()
        .zip(&unseen)
        .map(|(g, &masked)| if masked { 0.0 } else { g })
        .collect();
    let mut packed_grad = Vec::with_capacity(rows * (d.head_dim + 1));
    for r in 0..rows {
        packed_grad.extend_from_slice(&d_out[r * d.head_dim..(r + 1) * d.head_dim]);
        packed_grad.push(d_lse[r]);
    }
    let packed_grad = Tensor::<B, 4>::from_data(
        TensorData::new(packed_grad, [d.batch, d.heads, d.q_len, d.head_dim + 1]),
        &Default::default(),
    )
    .into_primitive()
    .tensor();
    let grads = backward(inputs(case, block_size, sparse), packed, packed_grad);
    let to64 = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
    let want = case.backward64(&x, &to64(&d_out), &to64(&d_lse));
    assert_close(
        &format!("{label} dq"),
        &values::<4>(grads.q),
        &want.q,
        TOL,
        seed,
    );
    assert_close(
        &format!("{label} dk"),
        &values::<4>(grads.k),
        &want.k,
        TOL,
        seed,
    );
    assert_close(
        &format!("{label} dv"),
        &values::<4>(grads.v),
        &want.v,
        TOL,
        seed,
    );
    match (grads.table, case.index.is_some()) {
        // each entry sums every pair of its bucket and head in `f32` (the reference op over the
        // whole sequence, in several buckets of up to 2 x 178 x 284 terms), and with few
        // buckets these nearly cancel: measured against the terms' scale
        (Some(t), true) => assert_close_to_scale(
            &format!("{label} dtable"),
            &values::<2>(t),
            &want.table,
            &want.table_scale,
            TOL,
            seed,
        ),
        (None, false) => {}
        (t, _) => panic!("{label}: table gradient present: {}", t.is_some()),
    }
    match (grads.dense, want.dense) {
        (Some(g), Some(w)) => {
            assert_close(&format!("{label} ddense"), &values::<4>(g), &w, TOL, seed)
        }
        (None, None) => {}
        (g, _) => panic!("{label}: dense gradient present: {}", g.is_some()),
    }
}

fn random_case(rng: &mut rand_chacha::ChaCha8Rng, all_masked_batch: bool) -> Case {
    let head_dim = [1, 3, 8, 16, 32, 64][rng.random_range(0..6)];
    let k_len = rng.random_range(1..300);
    let column_offset = rng.random_range(0..30);
    let dims = Dims {
        batch: rng.random_range(1..3),
        heads: rng.random_range(1..4),
        q_len: rng.random_range(1..200),
        k_len,
        head_dim,
        buckets: rng.random_range(1..12),
        total_k_len: column_offset + k_len + rng.random_range(0..5),
        column_offset,
    };
    let features = Features {
        distance: rng.random_bool(0.8),
        dense: rng.random_bool(0.3),
        mask: all_masked_batch || rng.random_bool(0.6),
        all_masked_batch,
    };
    Case::random(rng, dims, features)
}

#[test]
fn fused_cpu_path_matches_float64() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("fused_cpu_path_matches_float64");
    for trial in 0..12 {
        let case = random_case(&mut rng, trial % 4 == 3);
        let block_size = [1, 16, 37, 128, 1000][rng.random_range(0..5)];
        for sparse in [false, true] {
            let label = format!("fused {:?} block {block_size} sparse {sparse}", case.dims);
            check(
                &case,
                &label,
                seed,
                <B as GraphAttentionBackend>::graph_attention_forward,
                <B as GraphAttentionBackend>::graph_attention_backward,
                block_size,
                sparse,
                &mut rng,
            );
        }
    }
}

#[test]
fn reference_op_matches_float64() {
    let _turn = crate::turn();
    let (mut rng, seed) = seeded_rng("reference_op_matches_float64");
    for trial in 0..6 {
        let case = random_case(&mut rng, trial % 3 == 2);
        let block_size = [7, 64, 128][rng.random_range(0..3)];
        for sparse in [false, true] {
            let label = format!(
                "reference {:?} block {block_size} sparse {sparse}",
                case.dims
            );
            check(
                &case,
                &label,
                seed,
                reference::forward::<B>,
                reference::backward::<B>,
                block_size,
                sparse,
                &mut rng,
            );
        }
    }
}

#[test]
#[should_panic(expected = "the distance index holds bucket 3, but the table has 3 rows")]
fn out_of_range_bucket_is_a_clear_panic() {
    let _turn = crate::turn();
    let (mut rng, _) = seeded_rng("out_of_range_bucket_is_a_clear_panic");
    let dims = Dims {
        batch: 1,
        heads: 1,
        q_len: 2,
        k_len: 2,
        head_dim: 4,
        buckets: 3,
        total_k_len: 2,
        column_offset: 0,
    };
    let features = Features {
        distance: true,
        dense: false,
        mask: false,
        all_masked_batch: false,
    };
    let mut case = Case::random(&mut rng, dims, features);
    case.index = Some(vec![0, 1, 2, 3]);
    <B as GraphAttentionBackend>::graph_attention_forward(inputs(&case, 16, false));
}

/// Forward and backward results of one implementation as flat vectors.
fn run_all(
    case: &Case,
    block_size: usize,
    sparse: bool,
    forward: Forward,
    backward: Backward,
    grad: &[f32],
) -> Vec<Vec<f64>> {
    let d = case.dims;
    let packed = forward(inputs(case, block_size, sparse));
    let packed_grad = float(grad, [d.batch, d.heads, d.q_len, d.head_dim + 1]);
    let grads = backward(
        inputs(case, block_size, sparse),
        packed.clone(),
        packed_grad,
    );
    let mut all = vec![
        values::<4>(packed),
        values::<4>(grads.q),
        values::<4>(grads.k),
        values::<4>(grads.v),
    ];
    all.extend(grads.table.map(values::<2>));
    all.extend(grads.dense.map(values::<4>));
    all
}

#[test]
fn sparse_and_dense_indexes_give_identical_results() {
    let _turn = crate::turn();
    let (mut rng, _) = seeded_rng("sparse_and_dense_indexes_give_identical_results");
    for trial in 0..8 {
        let mut case = random_case(&mut rng, trial % 4 == 1);
        if case.index.is_none() {
            continue;
        }
        // mostly far pairs, as in a graph
        let far = (case.dims.buckets - 1) as u8;
        if let Some(index) = &mut case.index {
            for bucket in index.iter_mut() {
                if rng.random_bool(0.8) {
                    *bucket = far;
                }
            }
        }
        let d = case.dims;
        let grad = uniform(
            &mut rng,
            d.batch * d.heads * d.q_len * (d.head_dim + 1),
            1.0,
        );
        let block_size = [1, 16, 128][rng.random_range(0..3)];
        let fused = |sparse| {
            run_all(
                &case,
                block_size,
                sparse,
                <B as GraphAttentionBackend>::graph_attention_forward,
                <B as GraphAttentionBackend>::graph_attention_backward,
                &grad,
            )
        };
        assert_eq!(fused(false), fused(true), "fused {:?}", case.dims);
        let reference = |sparse| {
            run_all(
                &case,
                block_size,
                sparse,
                reference::forward::<B>,
                reference::backward::<B>,
                &grad,
            )
        };
        assert_eq!(
            reference(false),
            reference(true),
            "reference {:?}",
            case.dims
        );
    }
}

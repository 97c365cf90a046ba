//! Ulysses attention over `cp` positions equals the attention op on the whole sequence, and
//! gives the ring's gradients: outputs and the gradients of q, k, v and the bias table. With
//! `f16` and `bf16` inputs both return the output and the gradients in the inputs' dtype, as
//! the op does on one device, and match it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
use common::{B, Inner, Rng, relative};
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, graph_attention};
use megagraph_models::AttendInputs;
use megagraph_parallel::{
    ParallelError, RingCall, RingEndpoint, UlyssesEndpoint, ring_attention, ulysses_attention,
};

const BATCH: usize = 2;
const HEADS: usize = 4;
const SEQ: usize = 12;
const HEAD_DIM: usize = 4;
const BUCKETS: usize = 5;

struct Case {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    index: Vec<i64>,
    table: Vec<f32>,
    padding: Vec<bool>,
    /// Weights of the output in the loss, `[batch, heads, seq, head_dim]`.
    out_weight: Vec<f32>,
    /// The dtype of q, k, v and the table (the values above rounded to it).
    dtype: DType,
}

impl Case {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let n = BATCH * HEADS * SEQ * HEAD_DIM;
        let mut vec = |len: usize, a: f32| (0..len).map(|_| rng.uniform(a)).collect::<Vec<f32>>();
        let (q, k, v) = (vec(n, 1.5), vec(n, 1.5), vec(n, 1.0));
        let table = vec(BUCKETS * HEADS, 1.0);
        let out_weight = vec(n, 1.0);
        let index = (0..BATCH * SEQ * SEQ)
            .map(|_| rng.below(BUCKETS as u64) as i64)
            .collect();
        // batch 1 has its last 3 nodes padded
        let padding = (0..BATCH * SEQ)
            .map(|i| i / SEQ == 1 && i % SEQ >= SEQ - 3)
            .collect();
        Self {
            q,
            k,
            v,
            index,
            table,
            padding,
            out_weight,
            dtype: DType::F32,
        }
    }
}

/// Output and gradients, as host vectors in whole-sequence layout.
#[derive(Default)]
struct Results {
    output: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    dtable: Vec<f32>,
    /// Bytes the positions sent to each other (counted by their endpoints), summed.
    sent_bytes: u64,
    /// The dtypes of the output and of the gradients of q, k, v and the table.
    dtypes: Vec<DType>,
    /// The scale of the table gradient's terms: the sum over positions of their gradients'
    /// magnitudes (a sum of terms that may cancel is accurate relative to it).
    dtable_scale: Vec<f32>,
}

fn host<const D: usize>(t: Tensor<Inner, D>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

/// `data[b, h, rows, ..]` of a `[BATCH, HEADS, SEQ, width]` row-major vector.
fn rows(data: &[f32], width: usize, range: std::ops::Range<usize>) -> Vec<f32> {
    (0..BATCH * HEADS)
        .flat_map(|bh| {
            range
                .clone()
                .flat_map(move |row| (0..width).map(move |d| (bh * SEQ + row) * width + d))
        })
        .map(|i| data[i])
        .collect()
}

/// The inputs of the rows `range` as leaves, the table as a leaf, and the loss weights.
struct Leaves {
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    table: Tensor<B, 2>,
    weight: Tensor<B, 4>,
}

impl Leaves {
    /// The attention inputs of these leaves with `bias` and [`OPTIONS`].
    fn inputs(&self, bias: AttentionBias<B>) -> AttendInputs<B> {
        AttendInputs {
            q: self.q.clone(),
            k: self.k.clone(),
            v: self.v.clone(),
            bias,
            options: OPTIONS,
        }
    }
}

fn leaves(case: &Case, range: std::ops::Range<usize>) -> Leaves {
    let device = Default::default();
    let t4 = |v: &[f32]| {
        Tensor::<B, 4>::from_data(
            TensorData::new(
                rows(v, HEAD_DIM, range.clone()),
                [BATCH, HEADS, range.len(), HEAD_DIM],
            ),
            &device,
        )
    };
    Leaves {
        q: t4(&case.q).cast(case.dtype).require_grad(),
        k: t4(&case.k).cast(case.dtype).require_grad(),
        v: t4(&case.v).cast(case.dtype).require_grad(),
        table: Tensor::<B, 2>::from_data(
            TensorData::new(case.table.clone(), [BUCKETS, HEADS]),
            &device,
        )
        .cast(case.dtype)
        .require_grad(),
        weight: t4(&case.out_weight),
    }
}

/// The index rows `range` over every column, and the padding of the nodes `columns`.
fn bias(
    case: &Case,
    table: Tensor<B, 2>,
    range: std::ops::Range<usize>,
    columns: std::ops::Range<usize>,
) -> AttentionBias<B> {
    let device = Default::default();
    let index: Vec<i64> = (0..BATCH)
        .flat_map(|b| {
            range
                .clone()
                .flat_map(move |i| (0..SEQ).map(move |j| (b * SEQ + i) * SEQ + j))
        })
        .map(|i| case.index[i])
        .collect();
    let padding: Vec<bool> = (0..BATCH)
        .flat_map(|b| columns.clone().map(move |i| b * SEQ + i))
        .map(|i| case.padding[i])
        .collect();
    AttentionBias {
        distance: Some(DistanceBias {
            index: Tensor::<B, 3, Int>::from_data(
                TensorData::new(index, [BATCH, range.len(), SEQ]),
                &device,
            )
            .into(),
            table,
            column_offset: 0,
        }),
        dense: None,
        key_padding_mask: Some(Tensor::<B, 2, Bool>::from_data(
            TensorData::new(padding, [BATCH, columns.len()]),
            &device,
        )),
    }
}

const OPTIONS: AttentionOptions = AttentionOptions {
    scale: None,
    block_size: 5,
};

/// Output and gradients of `output` under the weighted-sum loss.
fn results(leaves: &Leaves, output: Tensor<B, 4>) -> Results {
    let grads = (output.clone().cast(DType::F32) * leaves.weight.clone())
        .sum()
        .backward();
    let grad4 = |t: &Tensor<B, 4>| t.grad(&grads).unwrap_or_else(|| panic!("no gradient"));
    let (dq, dk, dv) = (grad4(&leaves.q), grad4(&leaves.k), grad4(&leaves.v));
    let dtable = leaves
        .table
        .grad(&grads)
        .unwrap_or_else(|| panic!("no table gradient"));
    let dtypes = vec![output.dtype(), dq.dtype(), dk.dtype(), dv.dtype(), dtable.dtype()];
    let dtable = host(dtable);
    Results {
        output: host(output.inner()),
        dq: host(dq),
        dk: host(dk),
        dv: host(dv),
        dtable_scale: dtable.iter().map(|x| x.abs()).collect(),
        dtable,
        sent_bytes: 0,
        dtypes,
    }
}

fn whole(case: &Case) -> Results {
    let leaves = leaves(case, 0..SEQ);
    let bias = bias(case, leaves.table.clone(), 0..SEQ, 0..SEQ);
    let output = graph_attention(
        leaves.q.clone(),
        leaves.k.clone(),
        leaves.v.clone(),
        bias,
        &OPTIONS,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .output;
    results(&leaves, output)
}

/// Which context-parallel mode a position runs.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Ring,
    Ulysses,
}

/// Runs `cp` positions on threads and reassembles whole-sequence results (the table gradient
/// summed over positions, as the gradient all-reduce does).
fn parallel(case: &Arc<Case>, cp: usize, mode: Mode) -> Result<Results, ParallelError> {
    let devices = vec![Default::default(); cp];
    let block = SEQ / cp;
    let call = RingCall {
        step: 3,
        micro: 0,
        layer: 1,
    };
    let handles: Vec<_> = match mode {
        Mode::Ring => RingEndpoint::<Inner>::ring(&devices, Duration::from_secs(30))
            .into_iter()
            .map(|ring| {
                let case = case.clone();
                std::thread::spawn(move || {
                    let range = ring.position() * block..(ring.position() + 1) * block;
                    let leaves = leaves(&case, range.clone());
                    let bias = bias(&case, leaves.table.clone(), range.clone(), range);
                    let attended = ring_attention(leaves.inputs(bias), &ring, call)?;
                    assert_eq!(attended.lse.dtype(), DType::F32, "the log-sum-exp stays f32");
                    let output = attended.output;
                    // forward and backward first, then what they sent
                    let results = results(&leaves, output);
                    let results = Results {
                        sent_bytes: ring.sent_bytes(),
                        ..results
                    };
                    ring.take_failure().map_or(Ok(results), Err)
                })
            })
            .collect(),
        Mode::Ulysses => UlyssesEndpoint::<Inner>::group(&devices, Duration::from_secs(30))
            .into_iter()
            .map(|group| {
                let case = case.clone();
                std::thread::spawn(move || {
                    let range = group.position() * block..(group.position() + 1) * block;
                    let leaves = leaves(&case, range);
                    // Ulysses reads the index of every row and the mask of every node
                    let bias = bias(&case, leaves.table.clone(), 0..SEQ, 0..SEQ);
                    let output = ulysses_attention(leaves.inputs(bias), &group, call)?;
                    // forward and backward first, then what they sent
                    let results = results(&leaves, output);
                    let results = Results {
                        sent_bytes: group.sent_bytes(),
                        ..results
                    };
                    group.take_failure().map_or(Ok(results), Err)
                })
            })
            .collect(),
    };
    let parts: Vec<Results> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| panic!("{mode:?} thread panicked"))
        })
        .collect::<Result<_, _>>()?;
    let merge = |get: &dyn Fn(&Results) -> &Vec<f32>| {
        let mut all = vec![0.0; BATCH * HEADS * SEQ * HEAD_DIM];
        for (r, part) in parts.iter().enumerate() {
            for bh in 0..BATCH * HEADS {
                let src = bh * block * HEAD_DIM;
                let dst = (bh * SEQ + r * block) * HEAD_DIM;
                all[dst..dst + block * HEAD_DIM]
                    .copy_from_slice(&get(part)[src..src + block * HEAD_DIM]);
            }
        }
        all
    };
    let (mut dtable, mut dtable_scale) = (vec![0.0; BUCKETS * HEADS], vec![0.0; BUCKETS * HEADS]);
    for part in &parts {
        for ((acc, scale), x) in dtable.iter_mut().zip(&mut dtable_scale).zip(&part.dtable) {
            *acc += x;
            *scale += x.abs();
        }
    }
    let dtypes = parts[0].dtypes.clone();
    assert!(parts.iter().all(|p| p.dtypes == dtypes), "{mode:?}: positions disagree on dtypes");
    Ok(Results {
        output: merge(&|p| &p.output),
        dq: merge(&|p| &p.dq),
        dk: merge(&|p| &p.dk),
        dv: merge(&|p| &p.dv),
        dtable,
        sent_bytes: parts.iter().map(|p| p.sent_bytes).sum(),
        dtypes,
        dtable_scale,
    })
}

fn assert_close(what: &str, got: &Results, expected: &Results) {
    for (name, a, b) in [
        ("output", &got.output, &expected.output),
        ("dq", &got.dq, &expected.dq),
        ("dk", &got.dk, &expected.dk),
        ("dv", &got.dv, &expected.dv),
        ("dtable", &got.dtable, &expected.dtable),
    ] {
        let rel = relative(a, b);
        assert!(rel <= 1e-5, "{what}: {name} differs by {rel:e} (relative)");
    }
}

#[test]
fn ulysses_equals_the_op_on_the_whole_sequence_and_the_ring() {
    let _turn = crate::turn();
    let case = Arc::new(Case::new(7));
    let expected = whole(&case);
    for cp in [1, 2, 4] {
        let ulysses =
            parallel(&case, cp, Mode::Ulysses).unwrap_or_else(|e| panic!("cp = {cp}: {e}"));
        assert_close(&format!("Ulysses, cp = {cp}"), &ulysses, &expected);
        let ring = parallel(&case, cp, Mode::Ring).unwrap_or_else(|e| panic!("cp = {cp}: {e}"));
        assert_close(
            &format!("Ulysses against the ring, cp = {cp}"),
            &ulysses,
            &ring,
        );
        // 4 all-to-alls forward and 4 backward; each position sends (cp - 1)/cp of its f32
        // [batch, heads, block, head_dim] tensor in each
        let tensor = (BATCH * HEADS * SEQ / cp * HEAD_DIM * 4) as u64;
        let expected = cp as u64 * 8 * tensor * (cp as u64 - 1) / cp as u64;
        assert_eq!(ulysses.sent_bytes, expected, "Ulysses bytes, cp = {cp}");
        // the ring sends K and V (and masks) every forward hop: more than Ulysses from cp = 4
        assert_eq!(ring.sent_bytes == 0, cp == 1, "ring bytes, cp = {cp}: {}", ring.sent_bytes);
        if cp == 4 {
            assert!(ring.sent_bytes > ulysses.sent_bytes, "{} vs {}", ring.sent_bytes, ulysses.sent_bytes);
        }
    }
}

/// `f16` and `bf16` q, k, v and table on the ring (cp = 2) and Ulysses (cp = 2): the output and
/// every gradient come back in the inputs' dtype, as on one device, and match one device
/// within the bound of the op's half-precision tests (`cube-kernels/tests/integration/half_precision.rs`):
/// each is an `f32` computation rounded once to the half type, so they differ by at most the
/// unit roundoff `u` (`2⁻¹¹` for `f16`, `2⁻⁸` for `bf16`) plus the `f32` tolerance, norm-wise
/// (the table gradient relative to the scale of its terms, which the positions sum).
#[test]
fn half_inputs_come_back_in_their_dtype_and_match_one_device() {
    let _turn = crate::turn();
    for (dtype, unit_roundoff) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        // the largest error against one device, in units of the unit roundoff
        let mut worst = 0.0f64;
        let case = Arc::new(Case {
            dtype,
            ..Case::new(5)
        });
        let expected = whole(&case);
        assert_eq!(expected.dtypes, vec![dtype; 5], "one device");
        let bound = unit_roundoff + 1e-5;
        for mode in [Mode::Ring, Mode::Ulysses] {
            let got = parallel(&case, 2, mode).unwrap_or_else(|e| panic!("{mode:?} {dtype:?}: {e}"));
            assert_eq!(got.dtypes, vec![dtype; 5], "{mode:?}: output, dq, dk, dv, dtable");
            for (name, a, b) in [
                ("output", &got.output, &expected.output),
                ("dq", &got.dq, &expected.dq),
                ("dk", &got.dk, &expected.dk),
                ("dv", &got.dv, &expected.dv),
            ] {
                let rel = relative(a, b);
                worst = worst.max(rel / unit_roundoff);
                assert!(rel <= bound, "{mode:?} {dtype:?}: {name} differs by {rel:e} > {bound:e}");
            }
            let scale: Vec<f32> = got.dtable_scale.iter().zip(&expected.dtable_scale).map(|(a, b)| a.max(*b)).collect();
            let rel = relative(&got.dtable, &expected.dtable) * norm(&expected.dtable) / norm(&scale);
            worst = worst.max(rel / unit_roundoff);
            assert!(rel <= bound, "{mode:?} {dtype:?}: dtable differs by {rel:e} of its terms' scale > {bound:e}");
        }
        println!("{dtype:?}: largest norm-wise difference from one device {worst:.3} u (bound 1 u + 1e-5)");
    }
}

fn norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt().max(1e-12)
}

#[test]
fn heads_that_do_not_divide_by_cp_are_a_typed_error() {
    let _turn = crate::turn();
    let case = Arc::new(Case::new(1));
    // 4 heads over 3 positions
    let error = parallel(&case, 3, Mode::Ulysses).err();
    assert!(
        matches!(
            error,
            Some(ParallelError::Model {
                field: "num_heads",
                value: 4,
                ..
            })
        ),
        "{error:?}"
    );
}

#[test]
fn a_missing_peer_is_an_error_not_a_hang() {
    let _turn = crate::turn();
    let case = Arc::new(Case::new(2));
    let mut group = UlyssesEndpoint::<Inner>::group(
        &[Default::default(), Default::default()],
        Duration::from_secs(30),
    );
    let alone = group.remove(0);
    drop(group);
    let leaves = leaves(&case, 0..SEQ / 2);
    let bias = bias(&case, leaves.table.clone(), 0..SEQ, 0..SEQ);
    let started = std::time::Instant::now();
    let error = ulysses_attention(
        AttendInputs {
            q: leaves.q,
            k: leaves.k,
            v: leaves.v,
            bias,
            options: OPTIONS,
        },
        &alone,
        RingCall::default(),
    )
    .err();
    assert!(
        matches!(error, Some(ParallelError::PeerGone { rank: 0, .. })),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

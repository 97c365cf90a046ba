//! Ring attention over `cp` blocks equals the attention op on the whole sequence: outputs,
//! log-sum-exps and the gradients of q, k, v, the bias table and a dense bias.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
use common::{B, Rng, relative};
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, graph_attention};
use megagraph_models::{AttendInputs, spatial_bias};
use megagraph_parallel::{ParallelError, RingCall, RingEndpoint, ring_attention};

const BATCH: usize = 2;
const HEADS: usize = 2;
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
    /// Weights of the log-sum-exp in the loss, `[batch, heads, seq]`.
    lse_weight: Vec<f32>,
    /// A dense bias `[batch, heads, seq, seq]` (each ring position gives its rows), when set.
    dense: Option<Vec<f32>>,
    /// The dtype of q, k, v, the table and the dense bias.
    dtype: DType,
}

impl Case {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let n = BATCH * HEADS * SEQ * HEAD_DIM;
        let mut vec = |len: usize, a: f32| (0..len).map(|_| rng.uniform(a)).collect::<Vec<f32>>();
        let q = vec(n, 1.5);
        let k = vec(n, 1.5);
        let v = vec(n, 1.0);
        let table = vec(BUCKETS * HEADS, 1.0);
        let out_weight = vec(n, 1.0);
        let lse_weight = vec(BATCH * HEADS * SEQ, 1.0);
        let index = (0..BATCH * SEQ * SEQ)
            .map(|_| (rng.below(BUCKETS as u64)) as i64)
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
            lse_weight,
            dense: None,
            dtype: DType::F32,
        }
    }

    /// The case with a random dense bias.
    fn with_dense(mut self, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        self.dense = Some((0..BATCH * HEADS * SEQ * SEQ).map(|_| rng.uniform(2.0)).collect());
        self
    }
}

/// `data[b, h, rows, d]` of a `[BATCH, HEADS, SEQ, width]` row-major vector.
fn rows(data: &[f32], width: usize, range: std::ops::Range<usize>) -> Vec<f32> {
    let mut out = Vec::new();
    for bh in 0..BATCH * HEADS {
        for row in range.clone() {
            let start = (bh * SEQ + row) * width;
            out.extend_from_slice(&data[start..start + width]);
        }
    }
    out
}

/// Gradients and results of one computation, as host vectors in whole-sequence layout.
#[derive(Default)]
struct Results {
    output: Vec<f32>,
    lse: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    dtable: Vec<f32>,
    /// The dense bias's gradient, `[batch, heads, seq, seq]` (empty without one).
    ddense: Vec<f32>,
    /// The dtypes of the output and of the gradients of q and of the dense bias (if any).
    dtypes: Vec<DType>,
}

fn host<const D: usize>(t: Tensor<common::Inner, D>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

fn whole(case: &Case) -> Results {
    let device = Default::default();
    let t4 = |v: &[f32]| {
        Tensor::<B, 4>::from_data(
            TensorData::new(v.to_vec(), [BATCH, HEADS, SEQ, HEAD_DIM]),
            &device,
        )
        .cast(case.dtype)
        .require_grad()
    };
    let (q, k, v) = (t4(&case.q), t4(&case.k), t4(&case.v));
    let table = Tensor::<B, 2>::from_data(
        TensorData::new(case.table.clone(), [BUCKETS, HEADS]),
        &device,
    )
    .cast(case.dtype)
    .require_grad();
    let index = Tensor::<B, 3, Int>::from_data(
        TensorData::new(case.index.clone(), [BATCH, SEQ, SEQ]),
        &device,
    );
    let padding = Tensor::<B, 2, Bool>::from_data(
        TensorData::new(case.padding.clone(), [BATCH, SEQ]),
        &device,
    );
    let distance = DistanceBias {
        index: index.into(),
        table: table.clone(),
        column_offset: 0,
    };
    let mut bias = spatial_bias(distance, padding);
    let dense = case.dense.as_ref().map(|dense| {
        Tensor::<B, 4>::from_data(TensorData::new(dense.clone(), [BATCH, HEADS, SEQ, SEQ]), &device)
            .cast(case.dtype)
            .require_grad()
    });
    bias.dense = dense.clone();
    let options = AttentionOptions {
        scale: None,
        block_size: 5,
    };
    let result = graph_attention(q.clone(), k.clone(), v.clone(), bias, &options)
        .unwrap_or_else(|e| panic!("{e}"));
    let w_out = Tensor::<B, 4>::from_data(
        TensorData::new(case.out_weight.clone(), [BATCH, HEADS, SEQ, HEAD_DIM]),
        &device,
    );
    let w_lse = Tensor::<B, 3>::from_data(
        TensorData::new(case.lse_weight.clone(), [BATCH, HEADS, SEQ]),
        &device,
    );
    let loss = (result.output.clone().cast(DType::F32) * w_out).sum() + (result.lse.clone() * w_lse).sum();
    let grads = loss.backward();
    let grad = |t: &Tensor<B, 4>| host(t.grad(&grads).unwrap_or_else(|| panic!("no gradient")));
    Results {
        output: host(result.output.clone().inner()),
        lse: host(result.lse.inner()),
        dq: grad(&q),
        dk: grad(&k),
        dv: grad(&v),
        dtable: host(
            table
                .grad(&grads)
                .unwrap_or_else(|| panic!("no table gradient")),
        ),
        dtypes: std::iter::once(result.output.dtype())
            .chain([Some(&q), dense.as_ref()].into_iter().flatten().filter_map(|t| t.grad(&grads).map(|g| g.dtype())))
            .collect(),
        ddense: dense.map_or_else(Vec::new, |dense| grad(&dense)),
    }
}

/// One ring position's part of the computation; returns its block results.
fn position(
    case: Arc<Case>,
    ring: Arc<RingEndpoint<common::Inner>>,
) -> Result<Results, ParallelError> {
    let cp = ring.size();
    let block = SEQ / cp;
    let r = ring.position();
    let range = r * block..(r + 1) * block;
    let device = Default::default();
    let t4 = |v: &[f32]| {
        Tensor::<B, 4>::from_data(
            TensorData::new(
                rows(v, HEAD_DIM, range.clone()),
                [BATCH, HEADS, block, HEAD_DIM],
            ),
            &device,
        )
        .cast(case.dtype)
        .require_grad()
    };
    let (q, k, v) = (t4(&case.q), t4(&case.k), t4(&case.v));
    let table = Tensor::<B, 2>::from_data(
        TensorData::new(case.table.clone(), [BUCKETS, HEADS]),
        &device,
    )
    .cast(case.dtype)
    .require_grad();
    let index_rows: Vec<i64> = (0..BATCH)
        .flat_map(|b| {
            let case = &case;
            range.clone().flat_map(move |i| {
                let start = (b * SEQ + i) * SEQ;
                case.index[start..start + SEQ].to_vec()
            })
        })
        .collect();
    let index =
        Tensor::<B, 3, Int>::from_data(TensorData::new(index_rows, [BATCH, block, SEQ]), &device);
    let padding: Vec<bool> = (0..BATCH)
        .flat_map(|b| range.clone().map(move |i| (b, i)))
        .map(|(b, i)| case.padding[b * SEQ + i])
        .collect();
    let padding =
        Tensor::<B, 2, Bool>::from_data(TensorData::new(padding, [BATCH, block]), &device);
    // this position's rows of the dense bias, over every column
    let dense = case.dense.as_ref().map(|dense| {
        Tensor::<B, 4>::from_data(TensorData::new(rows(dense, SEQ, range.clone()), [BATCH, HEADS, block, SEQ]), &device)
            .cast(case.dtype)
            .require_grad()
    });
    let options = AttentionOptions {
        scale: None,
        block_size: 3,
    };
    let call = RingCall {
        step: 0,
        micro: 0,
        layer: 0,
    };
    let result = ring_attention(
        AttendInputs {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            bias: AttentionBias {
                dense: dense.clone(),
                ..spatial_bias(
                    DistanceBias {
                        index: index.into(),
                        table: table.clone(),
                        column_offset: 0,
                    },
                    padding,
                )
            },
            options: options.clone(),
        },
        &ring,
        call,
    )?;
    let w_out = Tensor::<B, 4>::from_data(
        TensorData::new(
            rows(&case.out_weight, HEAD_DIM, range.clone()),
            [BATCH, HEADS, block, HEAD_DIM],
        ),
        &device,
    );
    let w_lse = Tensor::<B, 3>::from_data(
        TensorData::new(
            rows(&case.lse_weight, 1, range.clone()),
            [BATCH, HEADS, block],
        ),
        &device,
    );
    let loss = (result.output.clone().cast(DType::F32) * w_out).sum() + (result.lse.clone() * w_lse).sum();
    let grads = loss.backward();
    if let Some(failure) = ring.take_failure() {
        return Err(failure);
    }
    let grad = |t: &Tensor<B, 4>| host(t.grad(&grads).unwrap_or_else(|| panic!("no gradient")));
    Ok(Results {
        output: host(result.output.clone().inner()),
        lse: host(result.lse.inner()),
        dq: grad(&q),
        dk: grad(&k),
        dv: grad(&v),
        dtable: host(
            table
                .grad(&grads)
                .unwrap_or_else(|| panic!("no table gradient")),
        ),
        dtypes: std::iter::once(result.output.dtype())
            .chain([Some(&q), dense.as_ref()].into_iter().flatten().filter_map(|t| t.grad(&grads).map(|g| g.dtype())))
            .collect(),
        ddense: dense.map_or_else(Vec::new, |dense| grad(&dense)),
    })
}

/// Runs the ring on `cp` threads and reassembles whole-sequence results (the table gradient is
/// summed over positions, as the gradient all-reduce does).
fn ring(case: &Arc<Case>, cp: usize) -> Results {
    let devices = vec![Default::default(); cp];
    let endpoints = RingEndpoint::<common::Inner>::ring(&devices, Duration::from_secs(30));
    let handles: Vec<_> = endpoints
        .into_iter()
        .map(|endpoint| {
            let case = case.clone();
            std::thread::spawn(move || position(case, endpoint))
        })
        .collect();
    let parts: Vec<Results> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| panic!("ring thread panicked"))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let block = SEQ / cp;
    let mut out = Results {
        dtable: vec![0.0; BUCKETS * HEADS],
        ..Default::default()
    };
    // blocks back into [BATCH, HEADS, SEQ, width] order
    let merge = |get: &dyn Fn(&Results) -> &Vec<f32>, width: usize| {
        let mut all = vec![0.0; BATCH * HEADS * SEQ * width];
        for (r, part) in parts.iter().enumerate() {
            let data = get(part);
            for bh in 0..BATCH * HEADS {
                for i in 0..block {
                    let src = (bh * block + i) * width;
                    let dst = (bh * SEQ + r * block + i) * width;
                    all[dst..dst + width].copy_from_slice(&data[src..src + width]);
                }
            }
        }
        all
    };
    out.output = merge(&|p| &p.output, HEAD_DIM);
    out.lse = merge(&|p| &p.lse, 1);
    out.dq = merge(&|p| &p.dq, HEAD_DIM);
    out.dk = merge(&|p| &p.dk, HEAD_DIM);
    out.dv = merge(&|p| &p.dv, HEAD_DIM);
    if case.dense.is_some() {
        out.ddense = merge(&|p| &p.ddense, SEQ);
    }
    out.dtypes = parts[0].dtypes.clone();
    for part in &parts {
        for (acc, x) in out.dtable.iter_mut().zip(&part.dtable) {
            *acc += x;
        }
    }
    out
}

#[test]
fn ring_attention_equals_the_op_on_the_whole_sequence() {
    let _turn = crate::turn();
    let case = Arc::new(Case::new(42));
    let expected = whole(&case);
    for cp in [1, 2, 3, 4] {
        let got = ring(&case, cp);
        for (name, a, b) in [
            ("output", &got.output, &expected.output),
            ("lse", &got.lse, &expected.lse),
            ("dq", &got.dq, &expected.dq),
            ("dk", &got.dk, &expected.dk),
            ("dv", &got.dv, &expected.dv),
            ("dtable", &got.dtable, &expected.dtable),
        ] {
            let rel = relative(a, b);
            assert!(
                rel <= 1e-5,
                "cp = {cp}: {name} differs by {rel:e} (relative)"
            );
        }
    }
}

#[test]
fn ring_attention_with_a_dense_bias_equals_the_op_on_the_whole_sequence() {
    let _turn = crate::turn();
    // each position gives its rows of the bias over every column; each hop reads the held key
    // block's columns, and the bias's gradient is written back at that block's columns
    let case = Arc::new(Case::new(7).with_dense(8));
    let expected = whole(&case);
    assert_eq!(expected.ddense.len(), BATCH * HEADS * SEQ * SEQ);
    // the bias matters: without it the output differs
    let without = whole(&Case::new(7));
    assert!(relative(&without.output, &expected.output) > 1e-2);
    for cp in [1, 2, 3, 4] {
        let got = ring(&case, cp);
        for (name, a, b) in [
            ("output", &got.output, &expected.output),
            ("lse", &got.lse, &expected.lse),
            ("dq", &got.dq, &expected.dq),
            ("dk", &got.dk, &expected.dk),
            ("dv", &got.dv, &expected.dv),
            ("dtable", &got.dtable, &expected.dtable),
            ("ddense", &got.ddense, &expected.ddense),
        ] {
            assert_eq!(a.len(), b.len(), "cp = {cp}: {name} length");
            let rel = relative(a, b);
            assert!(
                rel <= 1e-5,
                "cp = {cp}: {name} differs by {rel:e} (relative)"
            );
        }
    }
}

/// `f16` and `bf16` inputs with a dense bias (cp = 2 and 4): the output and the gradients of q
/// and of the bias come back in the inputs' dtype, as on one device, and match one device
/// within one unit roundoff of the type plus the `f32` tolerance, norm-wise (each is an `f32`
/// computation rounded once to the half type; see `ulysses.rs`).
#[test]
fn half_inputs_with_a_dense_bias_come_back_in_their_dtype_and_match_one_device() {
    let _turn = crate::turn();
    for (dtype, unit_roundoff) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        let case = Arc::new(Case {
            dtype,
            ..Case::new(3).with_dense(4)
        });
        let expected = whole(&case);
        assert_eq!(expected.dtypes, vec![dtype; 3], "one device: output, dq, ddense");
        let bound = unit_roundoff + 1e-5;
        for cp in [2, 4] {
            let got = ring(&case, cp);
            assert_eq!(got.dtypes, vec![dtype; 3], "cp = {cp}: output, dq, ddense");
            for (name, a, b) in [
                ("output", &got.output, &expected.output),
                ("dq", &got.dq, &expected.dq),
                ("dk", &got.dk, &expected.dk),
                ("dv", &got.dv, &expected.dv),
                ("ddense", &got.ddense, &expected.ddense),
            ] {
                let rel = relative(a, b);
                assert!(rel <= bound, "{dtype:?} cp = {cp}: {name} differs by {rel:e} > {bound:e}");
            }
        }
    }
}

#[test]
fn a_missing_ring_neighbour_is_an_error_not_a_hang() {
    let _turn = crate::turn();
    let case = Arc::new(Case::new(1));
    let devices = vec![Default::default(); 2];
    let mut endpoints = RingEndpoint::<common::Inner>::ring(&devices, Duration::from_secs(30));
    // position 1 never runs: drop it, so position 0's receive finds the channel closed
    let alone = endpoints.remove(0);
    drop(endpoints);
    let started = std::time::Instant::now();
    let err = position(case, alone).err();
    assert!(
        matches!(err, Some(ParallelError::PeerGone { rank: 0, .. })),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn inconsistent_shapes_are_refused() {
    let _turn = crate::turn();
    let device = Default::default();
    let ring = RingEndpoint::<common::Inner>::ring(&[device], Duration::from_secs(1));
    let q = Tensor::<B, 4>::zeros([1, 2, 4, 4], &device);
    let k = Tensor::<B, 4>::zeros([1, 2, 4, 3], &device);
    let index = Tensor::<B, 3, Int>::zeros([1, 4, 4], &device);
    let table = Tensor::<B, 2>::zeros([3, 2], &device);
    let mask = Tensor::<B, 2, Int>::zeros([1, 4], &device).equal_elem(1);
    let err = ring_attention(
        AttendInputs {
            q,
            k: k.clone(),
            v: k,
            bias: AttentionBias {
                distance: Some(DistanceBias {
                    index: index.clone().into(),
                    table: table.clone(),
                    column_offset: 0,
                }),
                dense: None,
                key_padding_mask: Some(mask.clone()),
            },
            options: AttentionOptions::default(),
        },
        &ring[0],
        RingCall::default(),
    )
    .err();
    assert!(
        matches!(
            &err,
            Some(ParallelError::Attention {
                rank: 0,
                source: megagraph_kernels::AttentionError::ShapeMismatch {
                    tensor: "k",
                    dim: "head_dim",
                    ..
                }
            })
        ),
        "{err:?}"
    );
    // no distance bias: refused with a typed reason; a dense bias of the wrong width: a shape
    // error naming it
    let q = Tensor::<B, 4>::zeros([1, 2, 4, 4], &device);
    let no_distance = AttentionBias {
        distance: None,
        dense: None,
        key_padding_mask: Some(mask.clone()),
    };
    let err = ring_attention(
        AttendInputs {
            q: q.clone(),
            k: q.clone(),
            v: q.clone(),
            bias: no_distance,
            options: AttentionOptions::default(),
        },
        &ring[0],
        RingCall::default(),
    )
    .err();
    assert!(
        matches!(err, Some(ParallelError::Unsupported { rank: 0, .. })),
        "{err:?}"
    );
    let dense = AttentionBias {
        distance: Some(DistanceBias {
            index: index.into(),
            table,
            column_offset: 0,
        }),
        // one column short of the 4 keys of a ring of one
        dense: Some(Tensor::zeros([1, 2, 4, 3], &device)),
        key_padding_mask: None,
    };
    let err = ring_attention(
        AttendInputs {
            q: q.clone(),
            k: q.clone(),
            v: q,
            bias: dense,
            options: AttentionOptions::default(),
        },
        &ring[0],
        RingCall::default(),
    )
    .err();
    assert!(
        matches!(
            &err,
            Some(ParallelError::Attention {
                rank: 0,
                source: megagraph_kernels::AttentionError::ShapeMismatch {
                    tensor: "dense",
                    dim: "total_k_len",
                    expected: 4,
                    actual: 3,
                    ..
                }
            })
        ),
        "{err:?}"
    );
}

//! Sparse edge attention (TorchGT's mode) against its dense-masked equivalent computed in
//! float64 on fresh random inputs: outputs and the gradients of q, k and v, with self-loops,
//! queries without edges, duplicated edges, clamped logits, odd sizes, several batch elements and
//! heads, head_dim 8 and 64, on `Autodiff<Flex>` and on `Flex`'s fused path directly; the fused
//! path against the Burn-ops reference, its determinism over thread counts; and typed errors.

use burn::backend::{Autodiff, Flex};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use megagraph_graph::graph::{Graph, GraphOptions};
use megagraph_kernels::{
    AttentionError, GraphAttentionBackend, NORMALIZER_EPSILON, SCORE_CLAMP, SequenceEdges, SparseEdgeGrads,
    SparseEdgeOutput, join_global_token, reference, sparse_edge_attention,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type B = Autodiff<Flex>;

/// Shapes and data of one case, row-major `[batch, heads, seq, head_dim]`.
struct Case {
    dims: [usize; 4],
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    d_out: Vec<f32>,
    /// Per batch element, `adjacent[dst * seq + src]`: how many times the edge is given.
    adjacent: Vec<Vec<u8>>,
    scale: f32,
}

impl Case {
    /// Inputs uniform in `±spread` (queries and keys; values in ±1).
    fn random(dims: [usize; 4], density: f64, spread: f32, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n: usize = dims.iter().product();
        let mut values = |spread: f32| (0..n).map(|_| rng.random_range(-spread..spread)).collect::<Vec<f32>>();
        let (q, k, v, d_out) = (values(spread), values(spread), values(1.0), values(1.0));
        let seq = dims[2];
        let adjacent = (0..dims[0])
            .map(|_| {
                (0..seq * seq)
                    // the last query has no edge at all
                    .map(|pair| u8::from(pair / seq != seq - 1 && rng.random_bool(density)))
                    .collect()
            })
            .collect();
        Self { dims, q, k, v, d_out, adjacent, scale: 1.0 / (dims[3] as f32).sqrt() }
    }

    /// The case with about `fraction` of its edges given a second time (at the end of the list).
    fn with_duplicates(mut self, fraction: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for count in self.adjacent.iter_mut().flatten().filter(|count| **count > 0) {
            *count += u8::from(rng.random_bool(fraction));
        }
        assert!(self.adjacent.iter().flatten().any(|&count| count > 1), "some edge is duplicated");
        self
    }

    /// The edge lists: every present pair once in row-major order, then the second copies.
    fn edges(&self) -> Vec<Vec<(u32, u32)>> {
        let seq = self.dims[2];
        let pair = |p: usize| ((p % seq) as u32, (p / seq) as u32);
        self.adjacent
            .iter()
            .map(|adjacent| {
                let once = (0..seq * seq).filter(|&p| adjacent[p] > 0).map(pair);
                once.chain((0..seq * seq).filter(|&p| adjacent[p] > 1).map(pair)).collect()
            })
            .collect()
    }

    /// How many (edge, head) logits fall outside the clamp.
    fn clamped(&self) -> usize {
        let [batch, heads, seq, d] = self.dims;
        let mut count = 0;
        for b in 0..batch {
            for h in 0..heads {
                let at = |i: usize| ((b * heads + h) * seq + i) * d;
                for (p, _) in self.adjacent[b].iter().enumerate().filter(|(_, c)| **c > 0) {
                    let (i, j) = (p / seq, p % seq);
                    let s: f32 = (0..d).map(|c| self.q[at(i) + c] * self.k[at(j) + c]).sum::<f32>() * self.scale;
                    count += usize::from(s.abs() > SCORE_CLAMP);
                }
            }
        }
        count
    }

    fn tensor<BK: burn::tensor::backend::Backend>(&self, x: &[f32]) -> Tensor<BK, 4> {
        Tensor::from_data(TensorData::new(x.to_vec(), self.dims), &Default::default())
    }

    /// Output and gradients of q, k, v in float64 over every (query, key) pair with the
    /// adjacency as the mask.
    fn dense64(&self) -> [Vec<f64>; 4] {
        let [batch, heads, seq, d] = self.dims;
        let f = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
        let (q, k, v, d_out) = (f(&self.q), f(&self.k), f(&self.v), f(&self.d_out));
        let scale = f64::from(self.scale);
        let clamp = f64::from(SCORE_CLAMP);
        let (mut out, mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; q.len()], vec![0.0; q.len()], vec![0.0; q.len()]);
        for b in 0..batch {
            for h in 0..heads {
                let at = |i: usize| ((b * heads + h) * seq + i) * d;
                for i in 0..seq {
                    let qi = &q[at(i)..at(i) + d];
                    let mut scores = Vec::new();
                    for j in (0..seq).filter(|&j| self.adjacent[b][i * seq + j] > 0) {
                        let s: f64 = qi.iter().zip(&k[at(j)..at(j) + d]).map(|(a, c)| a * c).sum::<f64>() * scale;
                        // an edge given m times adds m equal terms
                        let m = f64::from(self.adjacent[b][i * seq + j]);
                        scores.push((j, s, m * s.clamp(-clamp, clamp).exp()));
                    }
                    let den: f64 = scores.iter().map(|&(_, _, w)| w).sum::<f64>() + f64::from(NORMALIZER_EPSILON);
                    let mut num = vec![0.0; d];
                    for &(j, _, w) in &scores {
                        for c in 0..d {
                            num[c] += w * v[at(j) + c];
                        }
                    }
                    let d_o = &d_out[at(i)..at(i) + d];
                    for c in 0..d {
                        out[at(i) + c] = num[c] / den;
                    }
                    // out = num / den: d_num = dO / den, d_den = -dO · num / den²
                    let d_den: f64 = -(0..d).map(|c| d_o[c] * num[c]).sum::<f64>() / (den * den);
                    for &(j, s, w) in &scores {
                        let d_w: f64 = (0..d).map(|c| d_o[c] / den * v[at(j) + c]).sum::<f64>() + d_den;
                        for c in 0..d {
                            dv[at(j) + c] += w * d_o[c] / den;
                        }
                        // the clamp passes the gradient inside its range only
                        let d_s = if s.abs() < clamp { d_w * w * scale } else { 0.0 };
                        for c in 0..d {
                            dq[at(i) + c] += d_s * k[at(j) + c];
                            dk[at(j) + c] += d_s * qi[c];
                        }
                    }
                }
            }
        }
        [out, dq, dk, dv]
    }
}

fn assert_close(name: &str, got: &[f32], want: &[f64]) {
    let scale = want.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let error = (f64::from(g) - w).abs() / scale;
        assert!(error <= 1e-5, "{name}[{i}]: {g} vs float64 {w} (relative {error:.2e})");
    }
}

/// Relative error of `got` against `want` (both `f32`) within 1e-5 of `want`'s largest entry.
fn assert_close32(name: &str, got: &[f32], want: &[f32]) {
    assert_close(name, got, &want.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>());
}

fn values<BK: burn::tensor::backend::Backend, const D: usize>(t: Tensor<BK, D>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

fn floats<const D: usize>(primitive: FloatTensor<Flex>) -> Vec<f32> {
    values(Tensor::<Flex, D>::from_primitive(TensorPrimitive::Float(primitive)))
}

/// The cases: odd sizes, several batch elements and heads, head_dim 3 to 64, duplicated edges,
/// and logits past the clamp (`true` where the case must have some).
fn cases() -> Vec<(Case, bool)> {
    let plain = [(1, [1, 1, 5, 3], 0.5, 1.5), (2, [2, 3, 17, 8], 0.3, 1.5), (4, [1, 4, 64, 64], 0.05, 1.5)];
    let mut cases: Vec<(Case, bool)> =
        plain.into_iter().map(|(seed, dims, density, spread)| (Case::random(dims, density, spread, seed), false)).collect();
    cases.push((Case::random([3, 2, 33, 16], 0.15, 1.5, 3).with_duplicates(0.3, 30), false));
    // logits past the clamp (zero gradient there), with duplicates, head_dim 4, 8 and 64
    cases.push((Case::random([2, 2, 9, 4], 0.6, 4.0, 5), true));
    cases.push((Case::random([2, 8, 40, 8], 0.2, 4.0, 6).with_duplicates(0.3, 60), true));
    cases.push((Case::random([2, 2, 24, 64], 0.25, 3.0, 7).with_duplicates(0.3, 70), true));
    for (case, clamped) in &cases {
        assert_eq!(case.clamped() > 0, *clamped, "case {:?} has {} clamped logits", case.dims, case.clamped());
    }
    cases
}

/// The output rows of every batch element and head's last query (which has no edge).
fn last_queries(out: &[f32], dims: [usize; 4]) -> Vec<f32> {
    out.chunks(dims[3]).skip(dims[2] - 1).step_by(dims[2]).flatten().copied().collect()
}

#[test]
fn matches_the_dense_masked_float64_equivalent_with_gradients() {
    let _turn = crate::turn();
    for (case, _) in cases() {
        let dims = case.dims;
        let device = Default::default();
        let (q, k, v) = (case.tensor::<B>(&case.q).require_grad(), case.tensor::<B>(&case.k).require_grad(), case.tensor::<B>(&case.v).require_grad());
        let edges = SequenceEdges::<B>::new(&case.edges(), dims[2], &device).expect("edges in range");
        let out = sparse_edge_attention(q.clone(), k.clone(), v.clone(), &edges, None).expect("consistent shapes");
        let grads = (out.clone() * case.tensor::<B>(&case.d_out)).sum().backward();
        let [want_out, want_dq, want_dk, want_dv] = case.dense64();
        let got_out = values(out.inner());
        assert_close("out", &got_out, &want_out);
        assert_close("dq", &values(q.grad(&grads).expect("q grad")), &want_dq);
        assert_close("dk", &values(k.grad(&grads).expect("k grad")), &want_dk);
        assert_close("dv", &values(v.grad(&grads).expect("v grad")), &want_dv);
        // the query without edges reads zeros, not NaN
        assert!(last_queries(&got_out, dims).iter().all(|&x| x == 0.0), "{:?}", last_queries(&got_out, dims));
    }
}

#[test]
fn flex_fused_path_matches_float64_and_the_burn_ops_reference() {
    let _turn = crate::turn();
    for (case, _) in cases() {
        let edges = SequenceEdges::<Flex>::new(&case.edges(), case.dims[2], &Default::default()).expect("edges in range");
        let inputs = edges.inputs(case.tensor(&case.q), case.tensor(&case.k), case.tensor(&case.v), case.scale);
        let grad = case.tensor::<Flex>(&case.d_out).into_primitive().tensor();
        let fused = Flex::sparse_edge_attention_forward(inputs.clone());
        let fused_grads = Flex::sparse_edge_attention_backward(inputs.clone(), fused.clone(), grad.clone());
        let burn_ops = reference::sparse_edge::forward(inputs.clone());
        let burn_ops_grads = reference::sparse_edge::backward(inputs, burn_ops.clone(), grad);
        let unpack = |output: SparseEdgeOutput<Flex>, grads: SparseEdgeGrads<Flex>| {
            [floats::<4>(output.out), floats::<3>(output.normalizer), floats::<4>(grads.q), floats::<4>(grads.k), floats::<4>(grads.v)]
        };
        let [out, normalizer, dq, dk, dv] = unpack(fused, fused_grads);
        let [want_out, want_dq, want_dk, want_dv] = case.dense64();
        assert_close("fused out", &out, &want_out);
        assert_close("fused dq", &dq, &want_dq);
        assert_close("fused dk", &dk, &want_dk);
        assert_close("fused dv", &dv, &want_dv);
        assert!(last_queries(&out, case.dims).iter().all(|&x| x == 0.0));
        for ((name, got), want) in ["out", "normalizer", "dq", "dk", "dv"].into_iter().zip([out, normalizer, dq, dk, dv]).zip(unpack(burn_ops, burn_ops_grads)) {
            assert_close32(&format!("fused vs Burn ops {name}"), &got, &want);
        }
    }
}

#[test]
fn fused_gradients_are_the_same_bits_for_any_thread_count() {
    let _turn = crate::turn();
    let case = Case::random([2, 4, 200, 8], 0.05, 2.0, 11).with_duplicates(0.2, 12);
    let edges = SequenceEdges::<Flex>::new(&case.edges(), case.dims[2], &Default::default()).expect("edges in range");
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
        pool.install(|| {
            let inputs = edges.inputs(case.tensor(&case.q), case.tensor(&case.k), case.tensor(&case.v), case.scale);
            let output = Flex::sparse_edge_attention_forward(inputs.clone());
            let grad = case.tensor::<Flex>(&case.d_out).into_primitive().tensor();
            let grads = Flex::sparse_edge_attention_backward(inputs, output.clone(), grad);
            [floats::<4>(output.out), floats::<4>(grads.q), floats::<4>(grads.k), floats::<4>(grads.v)]
                .map(|x| x.into_iter().map(f32::to_bits).collect::<Vec<u32>>())
        })
    };
    let once = run(4);
    assert_eq!(once, run(4), "two runs on 4 threads");
    assert_eq!(once, run(1), "4 threads against 1");
    assert_eq!(once, run(3), "4 threads against 3");
}

#[test]
fn half_precision_inputs_compute_in_f32_and_keep_their_dtype() {
    let _turn = crate::turn();
    let case = Case::random([1, 2, 30, 8], 0.2, 1.5, 13);
    let edges = SequenceEdges::<B>::new(&case.edges(), case.dims[2], &Default::default()).expect("edges in range");
    let half = |x: &[f32]| case.tensor::<B>(x).cast(DType::F16).require_grad();
    let (q, k, v) = (half(&case.q), half(&case.k), half(&case.v));
    let out = sparse_edge_attention(q.clone(), k.clone(), v.clone(), &edges, None).expect("consistent shapes");
    assert_eq!(out.dtype(), DType::F16);
    let grads = (out.clone() * case.tensor::<B>(&case.d_out).cast(DType::F16)).sum().backward();
    let dq = q.grad(&grads).expect("q grad");
    assert_eq!(dq.dtype(), DType::F16);
    // within f16's rounding of the float64 result (inputs rounded to f16 as well)
    let [want_out, want_dq, ..] = case.dense64();
    for (name, got, want) in [("out", values(out.inner().cast(DType::F32)), want_out), ("dq", values(dq.cast(DType::F32)), want_dq)] {
        let largest = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let worst = got.iter().zip(&want).fold(0.0f64, |m, (&g, &w)| m.max((f64::from(g) - w).abs()));
        assert!(worst <= 1e-2 * largest, "{name}: error {worst} against largest {largest}");
    }
}

#[test]
fn induced_edges_join_the_members_of_a_sequence_and_the_global_token() {
    let _turn = crate::turn();
    // a path 0-1-2-3-4; the sequence holds nodes 3, 1, 2 (node 0 and 4 are outside)
    let graph = Graph::from_edges(5, &[(0, 1), (1, 2), (2, 3), (3, 4)], &GraphOptions::default()).expect("graph");
    let members: &[u32] = &[3, 1, 2];
    let device = Default::default();
    let count = |self_loops, global| SequenceEdges::<Flex>::induced(&graph, &[members], 4, self_loops, global, &device).expect("fits").len();
    // 1-2 and 2-3 both ways
    assert_eq!(count(false, false), 4);
    assert_eq!(count(true, false), 4 + 3);
    // the token at position 0, joined both ways to each member, and to itself
    assert_eq!(count(true, true), 4 + 3 + 2 * 3 + 1);
    // with the token a sequence of 3 needs 4 positions
    let error = SequenceEdges::<Flex>::induced(&graph, &[members], 3, false, true, &device).expect_err("no room for the token");
    assert!(matches!(error, AttentionError::EdgeOutOfRange { position: 3, seq_len: 3, .. }), "{error}");
}

#[test]
fn the_global_token_sits_at_position_0_and_the_nodes_one_later() {
    let _turn = crate::turn();
    let joined = join_global_token(&[(0, 1), (2, 2)], 3);
    assert_eq!(joined, vec![(1, 2), (3, 3), (0, 1), (1, 0), (0, 2), (2, 0), (0, 3), (3, 0), (0, 0)]);
    assert_eq!(join_global_token(&[], 0), vec![(0, 0)]);

    // the induced edges with the token are those edges in that one layout: the same attention
    // on random inputs (a path 0-1-2-3-4 of which the sequence holds 3, 1, 2, one pad position)
    let graph = Graph::from_edges(5, &[(0, 1), (1, 2), (2, 3), (3, 4)], &GraphOptions::default()).expect("graph");
    let members: &[u32] = &[3, 1, 2];
    let device = Default::default();
    let induced = SequenceEdges::<Flex>::induced(&graph, &[members], 5, true, true, &device).expect("fits");
    // positions of 3, 1, 2: 0, 1, 2; arcs 1-2 and 2-3 both ways, then a self-loop each
    let arcs = [(1, 2), (2, 1), (0, 2), (2, 0), (0, 0), (1, 1), (2, 2)];
    let layout = SequenceEdges::<Flex>::new(&[join_global_token(&arcs, 3)], 5, &device).expect("fits");
    let dims = [1, 2, 5, 4];
    let case = Case::random(dims, 0.0, 1.5, 9);
    let tensor = |x: &[f32]| Tensor::<Flex, 4>::from_data(TensorData::new(x.to_vec(), dims), &device);
    let attend = |edges: &SequenceEdges<Flex>| {
        let out = sparse_edge_attention(tensor(&case.q), tensor(&case.k), tensor(&case.v), edges, None).expect("shapes");
        out.into_data().iter::<f32>().collect::<Vec<f32>>()
    };
    assert_eq!(attend(&induced), attend(&layout));
}

#[test]
fn shapes_that_disagree_are_typed_errors() {
    let _turn = crate::turn();
    let device = Default::default();
    let edges = SequenceEdges::<Flex>::new(&[vec![(0, 1)]], 4, &device).expect("in range");
    let t = |dims: [usize; 4]| Tensor::<Flex, 4>::zeros(dims, &device);
    let error = sparse_edge_attention(t([1, 2, 4, 8]), t([1, 2, 5, 8]), t([1, 2, 4, 8]), &edges, None).expect_err("k is longer");
    assert!(matches!(error, AttentionError::ShapeMismatch { tensor: "k", dim: "seq", .. }), "{error}");
    let error = sparse_edge_attention(t([2, 2, 4, 8]), t([2, 2, 4, 8]), t([2, 2, 4, 8]), &edges, None).expect_err("one edge list for two sequences");
    assert!(matches!(error, AttentionError::ShapeMismatch { tensor: "edges", dim: "batch", .. }), "{error}");
    let error = SequenceEdges::<Flex>::new(&[vec![(0, 1)], vec![(2, 4)]], 4, &device).expect_err("position 4 of 4");
    assert!(matches!(error, AttentionError::EdgeOutOfRange { batch: 1, edge: 0, position: 4, seq_len: 4 }), "{error}");
}

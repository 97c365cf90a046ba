//! Sparse edge attention (TorchGT's mode) against its dense-masked equivalent computed in
//! float64 on fresh random inputs: outputs and the gradients of q, k and v, with self-loops,
//! queries without edges, odd sizes and several batch elements; and its typed errors.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Tensor, TensorData};
use megagraph_graph::graph::{Graph, GraphOptions};
use megagraph_kernels::{
    AttentionError, NORMALIZER_EPSILON, SCORE_CLAMP, SequenceEdges, join_global_token, sparse_edge_attention,
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
    /// Per batch element, `adjacent[dst * seq + src]`.
    adjacent: Vec<Vec<bool>>,
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
                    .map(|pair| pair / seq != seq - 1 && rng.random_bool(density))
                    .collect()
            })
            .collect();
        Self { dims, q, k, v, d_out, adjacent, scale: 1.0 / (dims[3] as f32).sqrt() }
    }

    fn edges(&self) -> Vec<Vec<(u32, u32)>> {
        let seq = self.dims[2];
        self.adjacent
            .iter()
            .map(|adjacent| {
                (0..seq * seq).filter(|&pair| adjacent[pair]).map(|pair| ((pair % seq) as u32, (pair / seq) as u32)).collect()
            })
            .collect()
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
                    for j in (0..seq).filter(|&j| self.adjacent[b][i * seq + j]) {
                        let s: f64 = qi.iter().zip(&k[at(j)..at(j) + d]).map(|(a, c)| a * c).sum::<f64>() * scale;
                        scores.push((j, s, s.clamp(-clamp, clamp).exp()));
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

#[test]
fn matches_the_dense_masked_float64_equivalent_with_gradients() {
    // the last case's logits often pass the clamp (zero gradient there)
    for (seed, dims, density, spread) in
        [(1, [1, 1, 5, 3], 0.5, 1.5), (2, [2, 3, 17, 8], 0.3, 1.5), (3, [3, 2, 33, 16], 0.15, 1.5), (4, [1, 4, 64, 64], 0.05, 1.5), (5, [2, 2, 9, 4], 0.6, 4.0)]
    {
        let case = Case::random(dims, density, spread, seed);
        let device = Default::default();
        let tensor = |x: &[f32]| Tensor::<B, 4>::from_data(TensorData::new(x.to_vec(), dims), &device).require_grad();
        let (q, k, v) = (tensor(&case.q), tensor(&case.k), tensor(&case.v));
        let edges = SequenceEdges::<B>::new(&case.edges(), dims[2], &device).expect("edges in range");
        let out = sparse_edge_attention(q.clone(), k.clone(), v.clone(), &edges, None).expect("consistent shapes");
        let d_out = Tensor::<B, 4>::from_data(TensorData::new(case.d_out.clone(), dims), &device);
        let grads = (out.clone() * d_out).sum().backward();
        let values = |t: Tensor<Flex, 4>| t.into_data().iter::<f32>().collect::<Vec<f32>>();
        let [want_out, want_dq, want_dk, want_dv] = case.dense64();
        assert_close("out", &values(out.inner()), &want_out);
        assert_close("dq", &values(q.grad(&grads).expect("q grad")), &want_dq);
        assert_close("dk", &values(k.grad(&grads).expect("k grad")), &want_dk);
        assert_close("dv", &values(v.grad(&grads).expect("v grad")), &want_dv);
        // the query without edges reads zeros
        let last = want_out.chunks(dims[3]).skip(dims[2] - 1).step_by(dims[2]).flatten().fold(0.0f64, |m, x| m.max(x.abs()));
        assert_eq!(last, 0.0);
    }
}

#[test]
fn induced_edges_join_the_members_of_a_sequence_and_the_global_token() {
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

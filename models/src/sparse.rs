//! [`SparseAttention`]: TorchGT's sparse edge attention as an [`Attend`] core, so the model's
//! own layers run it (the projections, FFN and dropout are the same as with full attention).

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use megagraph_kernels::{AttentionError, GraphAttentionBackend, SequenceEdges, sparse_edge_attention};

use crate::{Attend, AttendInputs};

/// Sparse edge attention over the edges of each sequence of a batch
/// ([`sparse_edge_attention`]): each query attends only to the keys joined to it by an edge
/// (the sequence's induced subgraph, self-loops, optionally a global token; see
/// [`SequenceEdges::induced`], and [`join_global_token`](megagraph_kernels::join_global_token)
/// for the global token at the model's graph token's position 0),
/// with TorchGT's clamped exponential instead of a softmax.
///
/// The distance bias and the key mask of [`AttendInputs::bias`] are not used: a padded
/// position has no edge, so it is never attended and reads zeros, and the spatial bias is what
/// full attention adds (TorchGT's sparse attention has none). Key dropout therefore does not
/// apply to this core.
#[derive(Clone, Debug)]
pub struct SparseAttention<B: Backend> {
    edges: SequenceEdges<B>,
}

impl<B: Backend> SparseAttention<B> {
    /// The core over `edges` (positions of the batch's sequences).
    pub fn new(edges: SequenceEdges<B>) -> Self {
        Self { edges }
    }

    /// The edges this core attends over.
    pub fn edges(&self) -> &SequenceEdges<B> {
        &self.edges
    }
}

impl<B: GraphAttentionBackend> Attend<B> for SparseAttention<B> {
    type Error = AttentionError;

    /// `inputs.q`, `k`, `v`: `[batch, heads, seq, head_dim]` with the batch and sequence length
    /// of the edges; output: the same shape.
    fn attend(
        &self,
        inputs: AttendInputs<B>,
        _layer: usize,
    ) -> Result<Tensor<B, 4>, AttentionError> {
        let AttendInputs {
            q, k, v, options, ..
        } = inputs;
        sparse_edge_attention(q, k, v, &self.edges, options.scale)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Bool, Distribution, Int, TensorData};
    use megagraph_kernels::DistanceBias;

    use super::*;
    use crate::{GraphAttentionConfig, LocalAttention, spatial_bias};

    type B = Flex;

    /// A zero spatial bias (every pair in bucket 0 of a zero table) and no padding.
    fn zero_bias(batch: usize, seq: usize, heads: usize) -> megagraph_kernels::AttentionBias<B> {
        let device = Default::default();
        let distance = DistanceBias {
            index: Tensor::<B, 3, Int>::zeros([batch, seq, seq], &device).into(),
            table: Tensor::<B, 2>::zeros([2, heads], &device),
            column_offset: 0,
        };
        spatial_bias(
            distance,
            Tensor::<B, 2, Bool>::from_data(
                TensorData::new(vec![false; batch * seq], [batch, seq]),
                &device,
            ),
        )
    }

    /// Dense float64 reference of sparse attention: for every (query, key) pair of `edges`,
    /// `exp(clamp(q·k·scale, -5, 5))`, normalized per query with `+1e-6`.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 4],
        edges: &[Vec<(u32, u32)>],
    ) -> Vec<f64> {
        let [batch, heads, seq, dim] = dims;
        let scale = 1.0 / (dim as f64).sqrt();
        let at = |t: &[f32], b: usize, h: usize, i: usize, d: usize| {
            f64::from(t[((b * heads + h) * seq + i) * dim + d])
        };
        let mut out = vec![0.0; batch * heads * seq * dim];
        for (b, list) in edges.iter().enumerate() {
            for h in 0..heads {
                let mut num = vec![0.0; seq * dim];
                let mut den = vec![0.0; seq];
                for &(src, dst) in list {
                    let (s, t) = (src as usize, dst as usize);
                    let logit: f64 = (0..dim)
                        .map(|d| at(q, b, h, t, d) * at(k, b, h, s, d))
                        .sum::<f64>()
                        * scale;
                    let w = logit.clamp(-5.0, 5.0).exp();
                    den[t] += w;
                    for d in 0..dim {
                        num[t * dim + d] += w * at(v, b, h, s, d);
                    }
                }
                for i in 0..seq {
                    for d in 0..dim {
                        out[((b * heads + h) * seq + i) * dim + d] =
                            num[i * dim + d] / (den[i] + 1e-6);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_sparse_core_computes_the_dense_masked_float64_reference() {
        let device = Default::default();
        let dims = [2, 3, 7, 4];
        let edges = vec![
            vec![
                (0, 1),
                (1, 0),
                (2, 2),
                (3, 4),
                (4, 3),
                (5, 6),
                (6, 5),
                (0, 0),
                (6, 6),
                (1, 1),
            ],
            vec![(6, 0), (5, 0), (4, 0), (0, 6), (3, 3), (2, 1), (1, 2)],
        ];
        let sparse = SparseAttention::new(
            SequenceEdges::<B>::new(&edges, 7, &device).expect("positions below 7"),
        );
        let random = || Tensor::<B, 4>::random(dims, Distribution::Normal(0.0, 2.0), &device);
        let (q, k, v) = (random(), random(), random());
        let host = |t: &Tensor<B, 4>| t.to_data().to_vec::<f32>().expect("f32 tensor");
        let expected = reference(&host(&q), &host(&k), &host(&v), dims, &edges);
        let inputs = AttendInputs {
            q,
            k,
            v,
            bias: zero_bias(2, 7, 3),
            options: megagraph_kernels::AttentionOptions {
                scale: None,
                block_size: 4,
            },
        };
        let got = host(&sparse.attend(inputs, 0).expect("consistent shapes"));
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (f64::from(*g) - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "element {i}: {g} vs {e}"
            );
        }
    }

    #[test]
    fn over_every_pair_with_small_logits_the_sparse_core_is_full_attention() {
        // with |logits| ≤ 5 the clamp is inactive and exp / Σ exp is the softmax
        let device = Default::default();
        let (batch, seq, d_model, heads) = (2, 6, 8, 2);
        let layer = GraphAttentionConfig::new(d_model, heads)
            .with_block_size(4)
            .init::<B>(&device);
        let x = Tensor::<B, 3>::random(
            [batch, seq, d_model],
            Distribution::Normal(0.0, 0.3),
            &device,
        );
        let all: Vec<(u32, u32)> = (0..seq as u32)
            .flat_map(|s| (0..seq as u32).map(move |d| (s, d)))
            .collect();
        let sparse = SparseAttention::new(
            SequenceEdges::<B>::new(&vec![all; batch], seq, &device).expect("positions below seq"),
        );
        let full = layer
            .forward_with(x.clone(), zero_bias(batch, seq, heads), &LocalAttention, 0)
            .expect("consistent shapes");
        let through = layer
            .forward_with(x, zero_bias(batch, seq, heads), &sparse, 0)
            .expect("consistent shapes");
        let tolerance = burn::tensor::Tolerance::<f32>::absolute(1e-5);
        full.into_data()
            .assert_approx_eq(&through.into_data(), tolerance);
    }

    #[test]
    fn edges_of_another_batch_shape_are_a_typed_error() {
        let device = Default::default();
        let sparse = SparseAttention::new(
            SequenceEdges::<B>::new(&[vec![(0, 1)]], 4, &device).expect("positions below 4"),
        );
        let q = Tensor::<B, 4>::zeros([1, 1, 5, 2], &device);
        let inputs = AttendInputs {
            q: q.clone(),
            k: q.clone(),
            v: q,
            bias: zero_bias(1, 5, 1),
            options: megagraph_kernels::AttentionOptions {
                scale: None,
                block_size: 4,
            },
        };
        assert!(matches!(
            sparse.attend(inputs, 0),
            Err(AttentionError::ShapeMismatch {
                tensor: "edges",
                dim: "seq",
                ..
            })
        ));
    }
}

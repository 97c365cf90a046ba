//! [`SequenceEdges`]: random edge paths of one sequence, for measuring a model with an edge
//! encoding (time and memory do not depend on the values).

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_models::encoders::EdgePaths;

use crate::split_mix::SplitMix;

/// The edge paths of one random sequence of `seq_len` nodes: `seq_len` edges with random
/// features, and for every pair of distinct nodes a path of 1 to `hops` random edges (the
/// encoding's work per pair is that of its longest path, whatever the graph).
#[derive(Clone, Debug)]
pub(crate) struct SequenceEdges {
    seq_len: usize,
    hops: usize,
    edge_dim: usize,
    /// `[seq_len, edge_dim]`: one edge per node.
    features: Vec<f32>,
    /// Per pair and hop the sequence's edge, `-1` past the path's end, `[seq, seq, hops]`.
    ids: Vec<i64>,
    /// `1 / length` of each pair's path, 0 on the diagonal, `[seq, seq]`.
    inverse_length: Vec<f32>,
}

impl SequenceEdges {
    /// Random paths of up to `hops` hops over `edge_dim`-wide edge features, drawn from `rng`.
    pub(crate) fn draw(rng: &mut SplitMix, seq_len: usize, hops: usize, edge_dim: usize) -> Self {
        let features = (0..seq_len * edge_dim).map(|_| rng.unit()).collect();
        let mut ids = vec![-1i64; seq_len * seq_len * hops];
        let mut inverse_length = vec![0.0f32; seq_len * seq_len];
        for pair in (0..seq_len * seq_len).filter(|pair| pair / seq_len != pair % seq_len) {
            let length = 1 + rng.below(hops as u64) as usize;
            inverse_length[pair] = 1.0 / length as f32;
            for hop in 0..length {
                ids[pair * hops + hop] = rng.below(seq_len as u64) as i64;
            }
        }
        Self {
            seq_len,
            hops,
            edge_dim,
            features,
            ids,
            inverse_length,
        }
    }

    /// The edge paths of a batch of `n` copies of the sequence (each copy with its own edges).
    pub(crate) fn batch<B: Backend>(&self, n: usize, device: &B::Device) -> EdgePaths<B> {
        let (s, hops) = (self.seq_len, self.hops);
        let edges = n * s;
        let features: Vec<f32> = (0..n).flat_map(|_| self.features.iter().copied()).collect();
        let ids: Vec<i64> = (0..n)
            .flat_map(|b| {
                self.ids
                    .iter()
                    .map(move |&id| if id < 0 { edges as i64 } else { (b * s) as i64 + id })
            })
            .collect();
        let inverse_length: Vec<f32> = (0..n).flat_map(|_| self.inverse_length.iter().copied()).collect();
        EdgePaths {
            features: Tensor::from_data(TensorData::new(features, [edges, self.edge_dim]), device),
            edge_ids: Tensor::<B, 4, Int>::from_data(TensorData::new(ids, [n, s, s, hops]), device),
            inverse_length: Tensor::from_data(TensorData::new(inverse_length, [n, s, s]), device),
        }
    }
}

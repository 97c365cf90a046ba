//! Temporal graph attention stacked over 1 or 2 hops of sampled neighbours (TGN, TGAT).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::{TemporalAttentionLayer, TemporalAttentionLayerConfig};

/// The sampled neighbours of one level of nodes.
#[derive(Debug, Clone)]
pub struct NeighbourHop<B: Backend> {
    /// Features of the edges to the neighbours, `[rows, fanout, dim_edge]`; `None` without edge
    /// features.
    pub edge_feat: Option<Tensor<B, 3>>,
    /// `t_row − t_edge` for each neighbour, `[rows, fanout]`.
    pub delta_t: Tensor<B, 2>,
    /// `[rows, fanout]`, `true` for slots without a neighbour.
    pub padding: Tensor<B, 2, Bool>,
}

/// Roots and their sampled neighbourhood, level by level.
///
/// Level 0 holds the roots, `[n_0, dim_node]`; level `l + 1` holds the neighbours of level `l`,
/// `[n_l · fanout_l, dim_node]`, where row `i · fanout_l + j` is neighbour slot `j` of row `i`
/// (padding slots hold any finite values). `hops[l]` describes the edges from level `l` to level
/// `l + 1`.
#[derive(Debug, Clone)]
pub struct TemporalNeighbourhood<B: Backend> {
    /// Node representations by level.
    pub nodes: Vec<Tensor<B, 2>>,
    /// Edges between consecutive levels.
    pub hops: Vec<NeighbourHop<B>>,
}

/// Configuration of a [`TemporalAttentionEmbedding`]: its first layer and how many follow.
#[derive(Config, Debug)]
pub struct TemporalAttentionEmbeddingConfig {
    /// The first layer; the later ones read its output width (`dim_out`) and share the rest.
    pub layer: TemporalAttentionLayerConfig,
    /// Layers = hops read (TGL's `layer`). Default: 1.
    #[config(default = 1)]
    pub layers: usize,
}

/// `layers` [`TemporalAttentionLayer`]s: layer `k` (from 0) computes new representations of
/// levels `0 ..= layers − 1 − k` from the level below, so the last layer yields the roots'.
#[derive(Module, Debug)]
pub struct TemporalAttentionEmbedding<B: Backend> {
    /// The layers, first to last.
    pub layers: Vec<TemporalAttentionLayer<B>>,
}

impl TemporalAttentionEmbeddingConfig {
    /// Initializes a [`TemporalAttentionEmbedding`] on `device`.
    ///
    /// # Panics
    ///
    /// If `layers` is 0 or `dim_out` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TemporalAttentionEmbedding<B> {
        assert!(
            self.layers > 0,
            "a temporal attention embedding needs at least one layer"
        );
        let later = TemporalAttentionLayerConfig {
            dim_node: self.layer.dim_out,
            ..self.layer.clone()
        };
        let layers = (0..self.layers)
            .map(|k| if k == 0 { &self.layer } else { &later }.init(device))
            .collect();
        TemporalAttentionEmbedding { layers }
    }
}

impl<B: Backend> TemporalAttentionEmbedding<B> {
    /// Embeddings of the roots, `[n_0, dim_out]`.
    ///
    /// # Panics
    ///
    /// If `input` does not have `layers + 1` levels and `layers` hops of consistent shapes.
    pub fn forward(&self, input: TemporalNeighbourhood<B>) -> Tensor<B, 2> {
        let depth = self.layers.len();
        assert!(
            input.nodes.len() == depth + 1 && input.hops.len() == depth,
            "{} layers read {} levels and {} hops, expected {} and {depth}",
            depth,
            input.nodes.len(),
            input.hops.len(),
            depth + 1
        );
        let mut nodes = input.nodes;
        for (k, layer) in self.layers.iter().enumerate() {
            nodes = (0..depth - k)
                .map(|level| {
                    let hop = &input.hops[level];
                    let [rows, fanout] = hop.delta_t.dims();
                    let width = nodes[level + 1].dims()[1];
                    layer.forward(
                        nodes[level].clone(),
                        nodes[level + 1].clone().reshape([rows, fanout, width]),
                        hop.edge_feat.clone(),
                        hop.delta_t.clone(),
                        hop.padding.clone(),
                    )
                })
                .collect();
        }
        nodes.swap_remove(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, mask, read, tensor};
    use burn::backend::Flex;

    #[test]
    fn two_layers_compose_the_layers_level_by_level() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (roots, fanout, dim_node, dim_out) = (2, 3, 4, 6);
        let layer = TemporalAttentionLayerConfig::new(dim_node, 0)
            .with_dim_time(3)
            .with_dim_out(dim_out)
            .with_dropout(0.0);
        let embedding = TemporalAttentionEmbeddingConfig::new(layer)
            .with_layers(2)
            .init::<Flex>(&device);
        let counts = [roots, roots * fanout, roots * fanout * fanout];
        let nodes: Vec<Tensor<Flex, 2>> = counts
            .iter()
            .map(|&n| rng.tensor::<Flex, 2>([n, dim_node], &device).0)
            .collect();
        let hops: Vec<NeighbourHop<Flex>> = counts[..2]
            .iter()
            .map(|&n| NeighbourHop {
                edge_feat: None,
                delta_t: tensor(rng.values(n * fanout, 0.0, 9.0), [n, fanout], &device),
                padding: mask(
                    (0..n * fanout).map(|i| i % 4 == 3).collect(),
                    [n, fanout],
                    &device,
                ),
            })
            .collect();
        let got = embedding.forward(TemporalNeighbourhood {
            nodes: nodes.clone(),
            hops: hops.clone(),
        });

        let apply = |layer: &TemporalAttentionLayer<Flex>,
                     level: usize,
                     below: Tensor<Flex, 2>,
                     this: Tensor<Flex, 2>| {
            let width = below.dims()[1];
            let hop = &hops[level];
            layer.forward(
                this,
                below.reshape([counts[level], fanout, width]),
                None,
                hop.delta_t.clone(),
                hop.padding.clone(),
            )
        };
        let [first, second] = [&embedding.layers[0], &embedding.layers[1]];
        let level1 = apply(first, 1, nodes[2].clone(), nodes[1].clone());
        let level0 = apply(first, 0, nodes[1].clone(), nodes[0].clone());
        let want = apply(second, 0, level1, level0);
        assert_eq!(got.dims(), [roots, dim_out]);
        assert_eq!(read(got), read(want), "seed {}", rng.seed);
    }
}

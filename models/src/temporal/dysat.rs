//! DySAT: structural attention within each snapshot, then temporal self-attention across them.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::{
    SnapshotAttention, SnapshotAttentionConfig, StructuralAttention, StructuralAttentionConfig,
};

/// Roots and their neighbours in each of the last `snapshots` snapshots (oldest first).
#[derive(Debug, Clone)]
pub struct SnapshotNeighbourhood<B: Backend> {
    /// The roots' representations per snapshot, `[roots, snapshots, dim_node]`.
    pub roots: Tensor<B, 3>,
    /// Their neighbours within each snapshot, `[roots, snapshots, fanout, dim_node]`.
    pub neighbours: Tensor<B, 4>,
    /// `[roots, snapshots, fanout]`, `true` for slots without a neighbour.
    pub padding: Tensor<B, 3, Bool>,
}

/// Configuration of a [`DysatEmbedding`].
#[derive(Config, Debug)]
pub struct DysatEmbeddingConfig {
    /// Width of the input node representations.
    pub dim_node: usize,
    /// Output width; a multiple of `att_head`. Default: 100.
    #[config(default = 100)]
    pub dim_out: usize,
    /// Snapshots read. Default: 3.
    #[config(default = 3)]
    pub snapshots: usize,
    /// Attention heads of both stages. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the attention weights. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// DySAT's embedding: a [`StructuralAttention`] (GAT) of each root in each snapshot, then a
/// [`SnapshotAttention`] over the root's snapshot embeddings.
#[derive(Module, Debug)]
pub struct DysatEmbedding<B: Backend> {
    /// Attention within a snapshot, shared by all snapshots.
    pub structural: StructuralAttention<B>,
    /// Attention across snapshots.
    pub temporal: SnapshotAttention<B>,
}

impl DysatEmbeddingConfig {
    /// Initializes a [`DysatEmbedding`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim_out` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> DysatEmbedding<B> {
        DysatEmbedding {
            structural: StructuralAttentionConfig::new(self.dim_node, self.dim_out)
                .with_att_head(self.att_head)
                .with_dropout(self.dropout)
                .init(device),
            temporal: SnapshotAttentionConfig::new(self.dim_out)
                .with_snapshots(self.snapshots)
                .with_att_head(self.att_head)
                .with_dropout(self.dropout)
                .init(device),
        }
    }
}

impl<B: Backend> DysatEmbedding<B> {
    /// Embeddings of the roots at the last snapshot, `[roots, dim_out]`.
    pub fn forward(&self, input: SnapshotNeighbourhood<B>) -> Tensor<B, 2> {
        let [roots, snapshots, fanout, dim] = input.neighbours.dims();
        let rows = roots * snapshots;
        let per_snapshot = self.structural.forward(
            input.roots.reshape([rows, dim]),
            input.neighbours.reshape([rows, fanout, dim]),
            input.padding.reshape([rows, fanout]),
        );
        let dim_out = per_snapshot.dims()[1];
        self.temporal
            .forward(per_snapshot.reshape([roots, snapshots, dim_out]))
    }
}

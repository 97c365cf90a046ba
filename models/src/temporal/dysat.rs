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

/// Configuration of a [`DysatEmbedding`]: its two stages. The structural stage's `dim_out`
/// must equal the temporal stage's `dim`.
#[derive(Config, Debug)]
pub struct DysatEmbeddingConfig {
    /// The GAT within each snapshot.
    pub structural: StructuralAttentionConfig,
    /// The self-attention across snapshots.
    pub temporal: SnapshotAttentionConfig,
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
    /// If the stages' widths disagree or are not multiples of their heads.
    pub fn init<B: Backend>(&self, device: &B::Device) -> DysatEmbedding<B> {
        assert_eq!(
            self.structural.dim_out, self.temporal.dim,
            "DySAT's structural output width must be its temporal input width"
        );
        DysatEmbedding {
            structural: self.structural.init(device),
            temporal: self.temporal.init(device),
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

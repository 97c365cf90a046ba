//! The named temporal models: TGL's configurations of TGN, JODIE, APAN, TGAT and DySAT, and a
//! memoryless baseline.

use super::{EmbeddingKind, MemoryUpdateKind, TemporalModelConfig};

/// A named temporal model (`--model tgn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TemporalPreset {
    /// TGN: GRU memory, one hop of temporal graph attention.
    Tgn,
    /// JODIE: RNN memory, identity embedding with JODIE's time projection.
    Jodie,
    /// APAN: attention over a mailbox of 10, identity embedding.
    Apan,
    /// TGAT: no memory, two hops of temporal graph attention.
    Tgat,
    /// DySAT: no memory, structural and temporal attention over 3 snapshots.
    Dysat,
    /// The memoryless baseline: TGN without its memory.
    None,
}

impl TemporalPreset {
    /// All presets, with their names.
    pub const ALL: [(&'static str, TemporalPreset); 6] = [
        ("tgn", TemporalPreset::Tgn),
        ("jodie", TemporalPreset::Jodie),
        ("apan", TemporalPreset::Apan),
        ("tgat", TemporalPreset::Tgat),
        ("dysat", TemporalPreset::Dysat),
        ("none", TemporalPreset::None),
    ];

    /// The preset's name.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, p)| *p == self).map_or("none", |(n, _)| n)
    }

    /// Looks a preset up by name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    /// The preset's configuration for data with `dim_node`-wide node features and
    /// `dim_edge`-wide edge features (0 for none).
    pub fn config(self, dim_node: usize, dim_edge: usize) -> TemporalModelConfig {
        match self {
            TemporalPreset::Tgn => TemporalModelConfig::tgn(dim_node, dim_edge),
            TemporalPreset::Jodie => TemporalModelConfig::jodie(dim_node, dim_edge),
            TemporalPreset::Apan => TemporalModelConfig::apan(dim_node, dim_edge),
            TemporalPreset::Tgat => TemporalModelConfig::tgat(dim_node, dim_edge),
            TemporalPreset::Dysat => TemporalModelConfig::dysat(dim_node, dim_edge),
            TemporalPreset::None => TemporalModelConfig::none(dim_node, dim_edge),
        }
    }
}

impl TemporalModelConfig {
    /// TGN (TGL's `tgn.yml`): GRU memory of 100, mailbox of 1, one layer of temporal graph
    /// attention with 2 heads, time encodings and embeddings of 100.
    pub fn tgn(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Attention)
            .with_memory_update(Some(MemoryUpdateKind::Gru))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
    }

    /// JODIE (`jodie.yml`): RNN memory of 100, identity embedding with the time projection.
    pub fn jodie(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Jodie)
            .with_memory_update(Some(MemoryUpdateKind::Rnn))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
    }

    /// APAN (`apan.yml`): the memory attends over a mailbox of 10 with 2 heads; identity
    /// embedding.
    pub fn apan(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Identity)
            .with_memory_update(Some(MemoryUpdateKind::Transformer))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_mailbox_size(10)
    }

    /// TGAT (`tgat.yml`): no memory, two layers of temporal graph attention with 2 heads.
    pub fn tgat(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Attention)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_layers(2)
    }

    /// DySAT (`dysat.yml`): no memory, a GAT per snapshot and self-attention over 3 snapshots.
    /// Reads node features only: edge features are kept for the configuration's record.
    pub fn dysat(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Dysat)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_snapshots(3)
    }

    /// The memoryless baseline: [`tgn`](Self::tgn) without its memory (one layer of temporal
    /// graph attention over node features, or zeros).
    pub fn none(dim_node: usize, dim_edge: usize) -> Self {
        Self::tgn(dim_node, dim_edge).with_memory_update(None)
    }
}

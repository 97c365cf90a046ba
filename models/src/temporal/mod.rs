//! Temporal GNN modules, named after TGL's (github.com/amazon-research/tgl) configs: node
//! [memory](NodeMemory) and [mailbox](Mailbox) state, the cosine [time encoding](TimeEncode),
//! the memory updaters ([GRU](GruMemoryUpdater) for TGN, [RNN](RnnMemoryUpdater) for JODIE,
//! [attention over the mailbox](TransformerMemoryUpdater) for APAN), the embeddings
//! ([identity](IdentityEmbedding), [JODIE's time projection](JodieTimeEmbedding),
//! [temporal graph attention](TemporalAttentionEmbedding) for TGN and TGAT,
//! [DySAT](DysatEmbedding)), the [edge predictor](EdgePredictor) and the
//! [model](TemporalModel) that wires them with its presets.
//!
//! Everything is tensor-level: samplers and trainers build the inputs. One training step, with
//! TGL's deferred memory update:
//!
//! 1. read the state of every row the batch touches with [`MemoryRows::gather`] and build a
//!    [`TemporalBatch`] (roots `[src; pos_dst; neg_dst]`, sampled neighbours, features);
//! 2. [`TemporalModel::forward`] gives the positive and negative logits (BCE with labels 1 and
//!    0) and the roots' updated memory; back-propagate and step the optimizer;
//! 3. [`TemporalModel::memory_update`] turns the updated memory into rows and mails, which
//!    [`MemoryWrite::apply`] writes to the [`NodeMemory`] and [`Mailbox`] (the latest event of
//!    a node wins);
//! 4. reset both at the start of each epoch; checkpoints hold their `to_state()`.

mod attention_embedding;
mod batch;
mod dysat;
mod edge_predictor;
mod error;
mod flat_linear;
mod gru_updater;
mod identity_embedding;
mod jodie_embedding;
mod mailbox;
mod masked_attention;
mod memory;
mod memory_cell;
mod memory_updater;
mod memory_write;
mod model;
mod preset;
mod rnn_updater;
mod rows;
mod snapshot_attention;
mod structural_attention;
mod temporal_attention;
mod time_encode;
mod transformer_updater;

#[cfg(test)]
mod reference;

pub use attention_embedding::{
    NeighbourHop, TemporalAttentionEmbedding, TemporalAttentionEmbeddingConfig,
    TemporalNeighbourhood,
};
pub use batch::{MemoryRows, NodeRows, TemporalBatch};
pub use dysat::{DysatEmbedding, DysatEmbeddingConfig, SnapshotNeighbourhood};
pub use edge_predictor::{EdgePredictor, EdgePredictorConfig};
pub use error::TemporalStateError;
pub use gru_updater::{GruMemoryUpdater, GruMemoryUpdaterConfig};
pub use identity_embedding::{IdentityEmbedding, IdentityEmbeddingConfig};
pub use jodie_embedding::{JodieTimeEmbedding, JodieTimeEmbeddingConfig};
pub use mailbox::{MailRows, Mailbox, MailboxState};
pub use memory::{NodeMemory, NodeMemoryState};
pub use memory_cell::{CellInput, MemoryCell, MemoryCellConfig};
pub use memory_updater::{MemoryUpdateKind, MemoryUpdater};
pub use memory_write::MemoryWrite;
pub use model::{EmbeddingKind, TemporalModel, TemporalModelConfig, TemporalOutput};
pub use preset::TemporalPreset;
pub use rnn_updater::{RnnMemoryUpdater, RnnMemoryUpdaterConfig};
pub use snapshot_attention::{SnapshotAttention, SnapshotAttentionConfig};
pub use structural_attention::{StructuralAttention, StructuralAttentionConfig};
pub use temporal_attention::{TemporalAttentionLayer, TemporalAttentionLayerConfig};
pub use time_encode::{TimeEncode, TimeEncodeConfig};
pub use transformer_updater::{TransformerMemoryUpdater, TransformerMemoryUpdaterConfig};

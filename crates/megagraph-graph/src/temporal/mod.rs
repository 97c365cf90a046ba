//! Temporal interaction graphs: continuous-time event streams for temporal GNNs (TGN, JODIE,
//! APAN, TGAT, DySAT).
//!
//! - [`EventStream`]: `(src, dst, time, label[, edge features])` events sorted by time.
//! - Loaders with typed [`TemporalError`]s naming file, line and field: the shared layout
//!   ([`load_temporal_dir`]), JODIE's raw CSV ([`load_jodie`]), TGL's `edges.csv`
//!   ([`load_tgl`]).
//! - [`ChronologicalSplit`]: 70/15/15 (configurable) by event index.
//! - [`InteractionConfig`]: the seeded synthetic user-item stream (the built-in default).
//! - [`TemporalCsr`] and [`TemporalSampler`]: most-recent or uniform neighbours strictly before
//!   a time, multi-hop, parallel over the batch; [`NegativeSampler`]: seeded negative
//!   destinations.
//! - [`WindowShards`]: DepBloom's temporally bounded spatial partitioning of a stream into
//!   windows sharded over workers, and its cross-shard event ratio.

mod csr;
mod error;
mod events;
mod jodie;
mod layout;
mod negative;
mod rng;
mod rows;
mod sampler;
mod shards;
mod split;
mod synthetic;
#[cfg(test)]
mod test_files;
mod tgl;

pub use csr::{EventDirection, TemporalCsr};
pub use error::TemporalError;
pub use events::EventStream;
pub use jodie::{JodieStream, load_jodie};
pub use layout::load_temporal_dir;
pub use negative::NegativeSampler;
pub use sampler::{SampledHop, SamplerConfig, SamplingStrategy, TemporalSampler};
pub use shards::{CLUSTERS_PER_WORKER, CrossShardRatio, ShardStrategy, WindowShard, WindowShards};
pub use split::{ChronologicalSplit, SplitFractions};
pub use synthetic::{InteractionConfig, SyntheticInteractions};
pub use tgl::{TglStream, load_tgl};

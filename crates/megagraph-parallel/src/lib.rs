//! Hybrid parallel training of megagraph's Graph Transformer on a `pp x cp x dp` mesh.
//!
//! The front door is [`ParallelTrainer`]: give it a [`ParallelConfig`], an initialized
//! [`GraphTransformer`](megagraph_models::GraphTransformer), a [`BatchSource`] and
//! [`TrainerOptions`]; call [`step`](ParallelTrainer::step) per optimizer step and
//! [`model`](ParallelTrainer::model) to get the parameters back. Each rank is a worker thread
//! with its own Burn device; the strategies live in one file each:
//!
//! - [`data`](crate::shard_sequences): the sequences of a step are sharded over `dp` replicas
//!   and `micro_batches` micro-batches; gradients are summed over each stage's `dp x cp` ranks
//!   with burn-collective, after a loss normalized by the step's GLOBAL number of training
//!   nodes, so every replica applies the single-device update;
//! - [context](ring_attention): each sequence is split into `cp` blocks and attention runs as
//!   an exact ring over them with a custom autodiff node ([`ContextParallelBackend`]); the
//!   distance index and the bias table never travel;
//! - [pipeline](one_forward_one_backward): `pp` stages of any layer split (`stage_layers`),
//!   scheduled 1F1B; activations and their gradients travel between stages, with the spatial
//!   table's value (buckets x heads floats of parameter data, not the bias matrix) going
//!   forward and its gradient coming back to stage 0.
//!
//! With dropout and key dropout 0, a step gives the single-device loss and parameters up to
//! float rounding, whatever the mesh (with dropout, each rank draws its own masks). A worker
//! that fails stops the whole mesh; the trainer returns the error naming the rank.
//!
//! Several processes (machines) can train together: data parallelism then spans the nodes
//! through burn-collective's global mode; see [`NodeConfig`] (and [`run_orchestrator`]) and
//! the [`nodes`] module docs.
//!
//! For measurements, [`RankReport`] gives each rank's step time, busy time (without waits on
//! peers) and its peak memory: with [`CountingAllocator`] as the global allocator on CPU
//! backends, or through a [`MemoryMeter`] set in [`TrainerOptions::meter`] (e.g. the CubeCL
//! runtime's statistics on a GPU, [`meter`]); see the `mesh` bench.

#![warn(missing_docs)]

mod context;
mod data;
mod error;
mod gradients;
mod group_endpoint;
mod memory;
mod mesh;
pub mod meter;
pub mod nodes;
mod stage;
pub mod threads;
mod trainer;
mod ulysses;
mod worker;

pub use megagraph_layout::{
    ParallelConfig, ParallelConfigError, PipelineAction, max_in_flight, one_forward_one_backward,
};
pub use context::{ContextParallelBackend, RingCall, RingEndpoint, ring_attention};
pub use megagraph_layout::CpMode;
pub use data::{BatchSource, BlockBatch, BlockRequest, TrainBatch, padded_len, shard_sequences};
pub use error::ParallelError;
pub use gradients::{CollectiveLease, ReplicaGradients, reset as reset_collective};
pub use memory::{CountingAllocator, reset_thread_peak, thread_peak_bytes};
pub use mesh::RankCoord;
pub use meter::{MemoryMeter, ThreadAllocatorMeter};
pub use nodes::{NodeConfig, NodeError, Orchestrator, run_orchestrator};
pub use stage::{StageModule, fresh_leaves, trainable};
pub use trainer::{OptimizerRecord, ParallelTrainer, StepOutput, TrainerOptions};
pub use ulysses::{Exchanged, UlyssesAttention, UlyssesBackend, UlyssesEndpoint, ulysses_attention};
/// A deliberate panic of one rank at one step, for tests of failure handling.
pub use trainer::InjectedFault;
pub use worker::RankReport;

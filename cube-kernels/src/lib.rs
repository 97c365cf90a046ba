//! Exact blockwise biased graph attention for Burn backends.
//!
//! [`graph_attention`] computes `softmax(scale · q·kᵀ + bias) · v` and the per-row log-sum-exp of
//! the same logits, where the bias is Graphormer's spatial encoding read through a `u8` distance
//! index and a learned table ([`DistanceBias`]), optionally plus a dense bias and a key padding
//! mask ([`AttentionBias`]). The keys are processed in tiles with an online softmax, so the
//! `[batch, heads, q_len, k_len]` score matrix is never stored; on
//! [`Autodiff`](burn::backend::Autodiff) a custom backward node recomputes it tile by tile.
//!
//! [`merge_partials`] combines results over disjoint key blocks exactly (ring / context
//! parallelism), using the log-sum-exp.
//!
//! Backends join through [`GraphAttentionBackend`]; its default methods are the
//! [`reference`](mod@reference) implementation with Burn tensor ops that works everywhere. `Flex` (and so `Autodiff<Flex>`)
//! runs a fused CPU implementation instead: per (query tile × key tile) block, `q·kᵀ` once, the
//! bias, the online softmax and `P·V` in the cache, parallel with rayon, in AVX2 registers where
//! the processor has them (about 7× the reference's speed at 2,708 nodes; `cargo bench --bench
//! fused_cpu` in the workspace root). With the `wgpu` or `cuda` feature, `CubeBackend` runs the
//! op as CubeCL kernels, and so does `Fusion<CubeBackend>` (Burn's `burn::backend::Wgpu` /
//! `Cuda` with its default `fusion` feature), where each pass is one custom operation of the
//! fusion stream. With few query rows (too few cubes to fill the device) their forward pass
//! splits the keys over several cubes and merges the parts by log-sum-exp (split-K, see
//! `backends::set_split_k_target_cubes`).

#![warn(missing_docs)]

mod attention;
mod autodiff;
mod backend;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod backends;
mod bias;
mod cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube;
mod edge_csr;
mod error;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod fusion;
mod graph_token;
mod index;
mod merge;
pub mod precision;
mod primitives;
pub mod reference;
mod sparse_edge;

pub use attention::{AttentionOptions, AttentionOutput, graph_attention};
pub use backend::{GraphAttentionAutodiffBackend, GraphAttentionBackend};
pub use bias::{AttentionBias, DistanceBias};
pub use error::AttentionError;
pub use index::{
    BucketIndex, BucketIndexPrimitive, CsrParts, SparseBucketIndex, SparseBucketIndexPrimitive, sparse_is_smaller,
};
pub use merge::merge_partials;
pub use precision::compute_dtype;
pub use edge_csr::HostEdges;
pub use primitives::{
    DistanceBiasPrimitive, GraphAttentionGrads, GraphAttentionInputs, SparseEdgeGrads, SparseEdgeInputs, SparseEdgeOutput,
};
pub use sparse_edge::{NORMALIZER_EPSILON, SCORE_CLAMP, SequenceEdges, join_global_token, sparse_edge_attention};

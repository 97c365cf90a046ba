#![warn(missing_docs)]
//! Graphormer-style Graph Transformer modules for [Burn](https://burn.dev).
//!
//! A [`GraphTransformer`] reads a [`GraphBatch`] (node sequences with their structural inputs) and
//! returns per-node logits. It is built from:
//!
//! - an [input encoder](encoders::InputEncoder): a linear map of node features, or learned node
//!   embeddings for graphs without features;
//! - a [centrality encoding](encoders::CentralityEncoding): learned in- and out-degree embeddings;
//! - a [spatial encoding](encoders::SpatialEncoding): one learned scalar per (shortest-path
//!   distance bucket, head) added to the attention logits, read through a `u8` distance index so
//!   the bias is never a dense `[batch, heads, seq, seq]` float tensor;
//! - optionally Graphormer's [edge encoding](encoders::EdgeEncoding): the mean over one shortest
//!   path of the edge features, projected per hop and head, a dense bias shared by all layers;
//! - optionally Graphormer's [graph token](encoders::GraphToken): one learned position per
//!   sequence joined to every node, whose pairs read their own row of the spatial table;
//! - optionally UniMP's [label input](encoders::LabelEncoding): a learned embedding of the class
//!   shown for a node ([`GraphBatch::label_input`]), added to its input representation;
//! - `L` pre-LN [layers](GraphTransformerLayer) of biased multi-head attention and a GELU FFN;
//! - a final layer norm and a linear classifier.
//!
//! Every dropout in the model is a [`FastDropout`] (see [`dropout`]): Philox masks filled in
//! parallel.
//!
//! The model is split into [`GraphTransformer::embed`], the layers and [`GraphTransformer::head`]
//! so that a pipeline can place the (heavy) embedding stage and any share of layers on a stage.
//!
//! The [`temporal`] module holds the temporal GNNs (TGN, JODIE, APAN, TGAT, DySAT): node memory
//! and mailbox state, memory updaters, temporal embeddings and the link predictor.

mod activation;
mod attend;
mod attention;
mod batch;
pub mod dropout;
pub mod encoders;
pub mod temporal;
mod layer;
mod loss;
mod materialize;
mod model;
mod preset;
mod sparse;

pub use activation::ExactGelu;
pub use attend::{Attend, AttendInputs, LocalAttention, key_mask, spatial_bias};
pub use attention::{GraphAttention, GraphAttentionConfig};
pub use batch::{GraphBatch, NodeInput};
pub use dropout::{FastDropout, FastDropoutConfig};
pub use layer::{GraphTransformerLayer, GraphTransformerLayerConfig};
pub use loss::{masked_cross_entropy, masked_smoothed_cross_entropy};
pub use materialize::materialize;
pub use model::{GraphTransformer, GraphTransformerConfig};
pub use preset::ModelPreset;
pub use sparse::SparseAttention;

pub use megagraph_kernels::GraphAttentionBackend;

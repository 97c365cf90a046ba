//! Ulysses sequence parallelism (DeepSpeed-Ulysses; TorchGT's "cluster-aware graph
//! parallelism"): the other context-parallel mode besides the ring.
//!
//! A sequence of `S` nodes is split into `cp` blocks of `S / cp` nodes; group position `r`
//! holds the queries, keys and values of block `r` for all `H` heads. An all-to-all scatters
//! the heads and gathers the sequence: afterwards position `r` holds heads
//! `r · H / cp .. (r + 1) · H / cp` of every node, attends over the whole sequence for those
//! heads (with the distance index of every row, the bias table's columns of its heads and the
//! key mask of every node), and a second all-to-all brings each block's rows back to their
//! owner for all heads. `H` must be a multiple of `cp`.
//!
//! Per layer that is 4 all-to-alls forward (q, k, v and the output) and 4 backward (their
//! gradients, by the same exchange reversed). The exchange is a custom autodiff node
//! ([`UlyssesBackend`]); the attention between them is the model's op with its own backward. The
//! gradient of the table holds this position's heads only; the data x context gradient
//! all-reduce sums the positions, as for the ring.
//!
//! Every position of a group must make the same calls in the same order; messages are tagged
//! with their [`RingCall`](crate::RingCall), tensor and phase, and a message that arrives
//! before it is awaited is kept until it is.

mod attention;
mod backend;
mod endpoint;
mod message;

pub(crate) use attention::gather_key_mask;
pub use attention::{UlyssesAttention, ulysses_attention};
pub use backend::UlyssesBackend;
pub use endpoint::UlyssesEndpoint;
pub use message::Exchanged;

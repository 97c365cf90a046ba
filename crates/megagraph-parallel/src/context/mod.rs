//! Graph-aware context parallelism: exact ring attention over the blocks of a sequence.
//!
//! A sequence of `S` nodes is split into `cp` blocks of `S / cp` nodes; ring position `r` holds
//! the queries, keys and values of block `r` and the ROWS of the distance index for its nodes,
//! `[batch, S / cp, S]`. The key/value blocks travel around the ring: at hop `t` position `r`
//! holds the block of position `(r - t) mod cp` and calls the attention op with
//! `column_offset = owner * S / cp` (so it reads the right index columns) and that block's key
//! padding mask, which travels with it. The partial results are merged exactly with
//! [`merge_partials`](megagraph_kernels::merge_partials). The distance index and the bias table
//! are never sent, nor a dense bias (the edge encoding's): position `r` holds its ROWS over every
//! column, `[batch, heads, S / cp, S]`, and each hop reads the columns of the block it holds; the
//! backward writes each hop's gradient into those columns.
//!
//! Backward (a custom autodiff node per position, see [`ContextParallelBackend`]): the node
//! recomputes each block's contribution from the merged output and log-sum-exp (the standard
//! ring/flash-attention backward), the key/value blocks travel the ring again, and the
//! gradients of K and V accumulate while travelling until they arrive back at their owner
//! (one more hop). The gradients of Q and of the table stay local; the table's partial
//! gradients of all positions are summed by the data x context gradient all-reduce.
//!
//! A position blocked in the ring backward holds its autodiff graph's lock, and Burn 0.21.0's
//! autodiff as published locks every graph at the end of any `backward()`;
//! [`RingEndpoint::barrier`] keeps that from turning into a deadlock when a pipeline also makes
//! ranks wait on each other. (megagraph's patched autodiff skips locked graphs there,
//! `vendor/burn-autodiff/PATCHES.md`; the barrier keeps the runtime safe without the patch.)
//!
//! All positions of a ring must run the same calls in the same order (same layers, same
//! micro-batches); every message is tagged with its [`RingCall`], phase and hop, and a mismatch
//! is reported as [`ParallelError::OutOfOrder`](crate::ParallelError::OutOfOrder) instead of
//! silently mixing blocks.

mod attention;
mod backend;
mod backward;
mod endpoint;
mod forward;
mod hop;
mod message;
mod packed;

pub use attention::ring_attention;
pub use backend::ContextParallelBackend;
pub use endpoint::RingEndpoint;
pub use message::RingCall;
pub(crate) use message::tensor_bytes;

//! What travels the ring: the call a message belongs to, its tag, and the key/value block.

use std::fmt;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{BoolTensor, FloatTensor};
use burn::tensor::{DType, Shape, TensorMetadata};

/// Identifies one ring attention call: the step, micro-batch and layer it belongs to. Every
/// position of a ring makes the same calls in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RingCall {
    /// Optimizer step (counted by the caller).
    pub step: u64,
    /// Micro-batch within the step.
    pub micro: usize,
    /// Global layer index.
    pub layer: usize,
}

/// Forward or backward half of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Forward,
    Backward,
    Barrier,
}

/// Tag of one ring message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RingTag {
    pub(super) call: RingCall,
    pub(super) phase: Phase,
    pub(super) hop: usize,
}

impl fmt::Display for RingTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} ring block of step {} micro-batch {} layer {} hop {}",
            self.phase, self.call.step, self.call.micro, self.call.layer, self.hop
        )
    }
}

/// A key/value block travelling the ring, with the key padding mask of its nodes and, in the
/// backward pass, the gradients accumulated for it so far.
#[derive(Clone, Debug)]
pub(super) struct Block<B: Backend> {
    /// Ring position whose nodes these are.
    pub(super) owner: usize,
    /// `[batch, heads, block, head_dim]`; absent on the last backward hop (only gradients travel).
    pub(super) k: Option<FloatTensor<B>>,
    /// `[batch, heads, block, head_dim]`; absent on the last backward hop.
    pub(super) v: Option<FloatTensor<B>>,
    /// `[batch, block]`, `true` = padding.
    pub(super) mask: Option<BoolTensor<B>>,
    /// Gradient of the keys accumulated so far (backward only).
    pub(super) dk: Option<FloatTensor<B>>,
    /// Gradient of the values accumulated so far (backward only).
    pub(super) dv: Option<FloatTensor<B>>,
}

impl<B: Backend> Block<B> {
    /// Bytes of the tensors the block carries.
    pub(super) fn bytes(&self) -> u64 {
        let floats = [&self.k, &self.v, &self.dk, &self.dv]
            .into_iter()
            .flatten()
            .map(|t| tensor_bytes(t.shape(), t.dtype()));
        let mask = self.mask.iter().map(|t| tensor_bytes(t.shape(), t.dtype()));
        floats.chain(mask).sum()
    }
}

/// Bytes of a tensor of `shape` and `dtype`.
pub(crate) fn tensor_bytes(shape: Shape, dtype: DType) -> u64 {
    (shape.num_elements() * dtype.size()) as u64
}

/// One message between ring neighbours.
#[derive(Debug)]
pub(super) struct RingMessage<B: Backend> {
    pub(super) tag: RingTag,
    pub(super) block: Block<B>,
}

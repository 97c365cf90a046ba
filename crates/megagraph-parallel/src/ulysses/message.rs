//! What travels between the positions of a Ulysses group: a tensor part tagged with its call,
//! the tensor it belongs to and the phase.

use std::fmt;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use crate::RingCall;

/// Which tensor of a layer's attention an all-to-all exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exchanged {
    /// The queries (sequence gathered, heads scattered).
    Queries,
    /// The keys.
    Keys,
    /// The values.
    Values,
    /// The attention output (heads gathered, sequence scattered back).
    Output,
    /// A layer's key mask (gathered: every position gets every block's).
    KeyMask,
}

/// Forward exchange, or the reversed exchange of its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    Forward,
    Backward,
}

/// Tag of one all-to-all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct UlyssesTag {
    pub(super) call: RingCall,
    pub(super) tensor: Exchanged,
    pub(super) phase: Phase,
}

impl fmt::Display for UlyssesTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} all-to-all of the {:?} of step {} micro-batch {} layer {}",
            self.phase, self.tensor, self.call.step, self.call.micro, self.call.layer
        )
    }
}

/// One part of an all-to-all, from position `source`.
#[derive(Debug)]
pub(super) struct UlyssesMessage<B: Backend> {
    pub(super) source: usize,
    pub(super) tag: UlyssesTag,
    pub(super) part: FloatTensor<B>,
}

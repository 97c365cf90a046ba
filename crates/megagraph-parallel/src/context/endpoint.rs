//! [`RingEndpoint`]: one position's channels of a context-parallel ring.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn::tensor::backend::Backend;

use super::message::{Block, Phase, RingCall, RingMessage, RingTag};
use crate::ParallelError;
use crate::group_endpoint::{GroupEndpoint, GroupLinks};

/// One position's endpoint of a context-parallel ring: a channel to the next position, one from
/// the previous position, and where failures inside the backward pass are recorded.
///
/// Build a ring with [`RingEndpoint::ring`] (one endpoint per thread) or let a
/// [`ParallelTrainer`](crate::ParallelTrainer) build its mesh.
pub type RingEndpoint<B> = GroupEndpoint<B, RingLinks<B>>;

/// The channels of a ring position: to the next position and from the previous one.
pub struct RingLinks<B: Backend> {
    next: Sender<RingMessage<B>>,
    prev: Mutex<Receiver<RingMessage<B>>>,
}

impl<B: Backend> GroupLinks for RingLinks<B> {
    const NAME: &'static str = "RingEndpoint";
    const BACKWARD: &'static str = "ring attention backward";

    fn connect(size: usize) -> Vec<Self> {
        // position p receives on receivers[p] and sends on senders[p + 1]; the originals drop
        // at the end, so a stopped position closes its neighbour's channel
        let (senders, receivers): (Vec<Sender<RingMessage<B>>>, Vec<_>) = (0..size).map(|_| channel()).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(position, prev)| RingLinks {
                next: senders[(position + 1) % size].clone(),
                prev: Mutex::new(prev),
            })
            .collect()
    }
}

impl<B: Backend> RingEndpoint<B> {
    /// A standalone ring of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`. Hand one endpoint to each thread.
    pub fn ring(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        Self::standalone(devices, timeout)
    }

    /// Returns once every position of the ring has called `barrier` for `call` (`size - 1`
    /// rounds of empty messages around the ring: after round `t` a position knows that the
    /// `t + 1` positions before it arrived).
    ///
    /// Call it right before a `backward()` whose graph holds ring attention when anything else
    /// can make a ring peer wait (a pipeline stage waiting for its gradient). Burn 0.21.0's
    /// autodiff as published (megagraph patches it, `vendor/burn-autodiff/PATCHES.md`) locks
    /// every live graph, one after the other, at the end of each `backward()`
    /// (orphan cleanup), so a position blocked in a ring backward holds its graph's lock; if a
    /// peer were still waiting for a rank that is itself stuck in that cleanup, the three would
    /// deadlock. Once every peer passed the barrier, a ring backward only waits on peers that
    /// are already inside theirs.
    ///
    /// # Errors
    ///
    /// A communication failure (lost peer, abort, timeout, out-of-order message).
    pub fn barrier(&self, call: RingCall) -> Result<(), ParallelError> {
        for hop in 0..self.size.saturating_sub(1) {
            let tag = RingTag {
                call,
                phase: Phase::Barrier,
                hop,
            };
            let empty = Block {
                owner: self.position,
                k: None,
                v: None,
                mask: None,
                dk: None,
                dv: None,
            };
            self.send(tag, empty)?;
            self.receive(tag)?;
        }
        Ok(())
    }

    pub(super) fn send(&self, tag: RingTag, block: Block<B>) -> Result<(), ParallelError> {
        self.count_sent(block.bytes());
        self.links
            .next
            .send(RingMessage { tag, block })
            .map_err(|_| ParallelError::PeerGone {
                rank: self.rank,
                waiting_for: format!("the next ring position ({tag})"),
            })
    }

    pub(super) fn receive(&self, tag: RingTag) -> Result<Block<B>, ParallelError> {
        let prev = self.links.prev.lock().map_err(|_| self.poisoned("ring receiver"))?;
        let message = self.wait(&prev, || tag.to_string())?;
        if message.tag != tag {
            return Err(ParallelError::OutOfOrder {
                rank: self.rank,
                expected: tag.to_string(),
                got: message.tag.to_string(),
            });
        }
        let device = &self.device;
        let block = message.block;
        Ok(Block {
            owner: block.owner,
            k: block.k.map(|t| B::float_to_device(t, device)),
            v: block.v.map(|t| B::float_to_device(t, device)),
            mask: block.mask.map(|t| B::bool_to_device(t, device)),
            dk: block.dk.map(|t| B::float_to_device(t, device)),
            dv: block.dv.map(|t| B::float_to_device(t, device)),
        })
    }
}

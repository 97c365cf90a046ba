//! [`RingEndpoint`]: one position's channels of a context-parallel ring.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::tensor::backend::Backend;

use super::message::{Block, Phase, RingCall, RingMessage, RingTag};
use crate::ParallelError;
use crate::mesh::{Control, receive};

/// One position's endpoint of a context-parallel ring: a channel to the next position, one from
/// the previous position, and where failures inside the backward pass are recorded.
///
/// Build a ring with [`RingEndpoint::ring`] (one endpoint per thread) or let a
/// [`ParallelTrainer`](crate::ParallelTrainer) build its mesh.
pub struct RingEndpoint<B: Backend> {
    pub(super) position: usize,
    pub(super) size: usize,
    pub(super) rank: usize,
    device: B::Device,
    next: Sender<RingMessage<B>>,
    prev: Mutex<Receiver<RingMessage<B>>>,
    control: Arc<Control>,
    failure: Mutex<Option<ParallelError>>,
    /// Time spent waiting for the previous position, in nanoseconds.
    waited_nanos: AtomicU64,
    /// Bytes of the tensors sent to the next position.
    sent_bytes: AtomicU64,
}

impl<B: Backend> fmt::Debug for RingEndpoint<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingEndpoint")
            .field("position", &self.position)
            .field("size", &self.size)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> RingEndpoint<B> {
    /// A standalone ring of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`. Hand one endpoint to each thread.
    pub fn ring(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        let control = Arc::new(Control::new(timeout));
        let ranks: Vec<usize> = (0..devices.len()).collect();
        Self::build(&ranks, devices, &control)
    }

    /// Endpoints for the ring of mesh ranks `ranks` (in ring order) on `devices`.
    pub(crate) fn build(
        ranks: &[usize],
        devices: &[B::Device],
        control: &Arc<Control>,
    ) -> Vec<Arc<Self>> {
        let size = ranks.len();
        // position p receives on receivers[p] and sends on senders[p + 1]; the originals drop
        // at the end, so a stopped position closes its neighbour's channel
        let (senders, receivers): (Vec<Sender<RingMessage<B>>>, Vec<_>) =
            (0..size).map(|_| channel()).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(position, prev)| {
                Arc::new(RingEndpoint {
                    position,
                    size,
                    rank: ranks[position],
                    device: devices[position].clone(),
                    next: senders[(position + 1) % size].clone(),
                    prev: Mutex::new(prev),
                    control: control.clone(),
                    failure: Mutex::new(None),
                    waited_nanos: AtomicU64::new(0),
                    sent_bytes: AtomicU64::new(0),
                })
            })
            .collect()
    }

    /// This endpoint's position in the ring.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The number of positions.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The mesh rank of this endpoint (its position for a standalone ring).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Total time this endpoint spent waiting for ring messages, in seconds.
    pub fn waited_seconds(&self) -> f64 {
        self.waited_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Total bytes of the tensors (keys, values, masks, key/value gradients) this endpoint
    /// sent to the next position.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes.load(Ordering::Relaxed)
    }

    /// Stops every endpoint of this ring (their waits return [`ParallelError::Aborted`]).
    pub fn abort(&self) {
        self.control.abort();
    }

    /// Takes the failure recorded inside a backward pass, if any. A backward node cannot
    /// return an error: it records it here, gives zero gradients, and the caller checks after
    /// `backward()`.
    pub fn take_failure(&self) -> Option<ParallelError> {
        self.failure.lock().ok().and_then(|mut slot| slot.take())
    }

    pub(super) fn record_failure(&self, error: ParallelError) {
        log::error!(
            "rank {}: ring attention backward failed: {error}",
            self.rank
        );
        self.control.abort();
        if let Ok(mut slot) = self.failure.lock()
            && slot.is_none()
        {
            *slot = Some(error);
        }
    }

    /// Returns once every position of the ring has called `barrier` for `call` (`size - 1`
    /// rounds of empty messages around the ring: after round `t` a position knows that the
    /// `t + 1` positions before it arrived).
    ///
    /// Call it right before a `backward()` whose graph holds ring attention when anything else
    /// can make a ring peer wait (a pipeline stage waiting for its gradient). Burn 0.21's
    /// autodiff locks every live graph, one after the other, at the end of each `backward()`
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
        self.sent_bytes.fetch_add(block.bytes(), Ordering::Relaxed);
        self.next
            .send(RingMessage { tag, block })
            .map_err(|_| ParallelError::PeerGone {
                rank: self.rank,
                waiting_for: format!("the next ring position ({tag})"),
            })
    }

    pub(super) fn receive(&self, tag: RingTag) -> Result<Block<B>, ParallelError> {
        let prev = self
            .prev
            .lock()
            .map_err(|_| ParallelError::WorkerPanicked {
                rank: self.rank,
                message: "ring receiver lock poisoned".into(),
            })?;
        let started = Instant::now();
        let message = receive(&prev, &self.control, self.rank, || tag.to_string());
        self.waited_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let message = message?;
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

//! [`UlyssesEndpoint`]: one position's channels of a Ulysses group (a channel to every other
//! position, one inbox) and the all-to-all over them.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn::tensor::backend::Backend;
use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use super::message::{UlyssesMessage, UlyssesTag};
use crate::ParallelError;
use crate::context::tensor_bytes;
use crate::mesh::{Control, receive};

/// One position's endpoint of a Ulysses group: a sender to every position, its inbox, the
/// parts that arrived before they were awaited, and where failures inside a backward pass are
/// recorded.
pub struct UlyssesEndpoint<B: Backend> {
    pub(super) position: usize,
    pub(super) size: usize,
    pub(super) rank: usize,
    device: B::Device,
    /// A sender to every other position (`None` at this one, so the inbox closes once every
    /// other position is gone).
    peers: Vec<Option<Sender<UlyssesMessage<B>>>>,
    inbox: Mutex<Receiver<UlyssesMessage<B>>>,
    early: Mutex<HashMap<(usize, UlyssesTag), FloatTensor<B>>>,
    control: Arc<Control>,
    failure: Mutex<Option<ParallelError>>,
    /// Bytes of the parts sent to the other positions.
    sent_bytes: AtomicU64,
}

impl<B: Backend> fmt::Debug for UlyssesEndpoint<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UlyssesEndpoint")
            .field("position", &self.position)
            .field("size", &self.size)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> UlyssesEndpoint<B> {
    /// A standalone group of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`. Hand one endpoint to each thread.
    pub fn group(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        let control = Arc::new(Control::new(timeout));
        let ranks: Vec<usize> = (0..devices.len()).collect();
        Self::build(&ranks, devices, &control)
    }

    /// Endpoints for the group of mesh ranks `ranks` (in position order) on `devices`.
    pub(crate) fn build(
        ranks: &[usize],
        devices: &[B::Device],
        control: &Arc<Control>,
    ) -> Vec<Arc<Self>> {
        let (senders, inboxes): (Vec<Sender<UlyssesMessage<B>>>, Vec<_>) =
            ranks.iter().map(|_| channel()).unzip();
        inboxes
            .into_iter()
            .enumerate()
            .map(|(position, inbox)| {
                Arc::new(Self {
                    position,
                    size: ranks.len(),
                    rank: ranks[position],
                    device: devices[position].clone(),
                    peers: senders
                        .iter()
                        .enumerate()
                        .map(|(target, sender)| (target != position).then(|| sender.clone()))
                        .collect(),
                    inbox: Mutex::new(inbox),
                    early: Mutex::new(HashMap::new()),
                    control: control.clone(),
                    failure: Mutex::new(None),
                    sent_bytes: AtomicU64::new(0),
                })
            })
            .collect()
    }

    /// This endpoint's position in the group.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The number of positions.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The mesh rank of this endpoint (its position for a standalone group).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Total bytes of the all-to-all parts this endpoint sent to the other positions.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes.load(Ordering::Relaxed)
    }

    /// Stops every endpoint of this group (their waits return [`ParallelError::Aborted`]).
    pub fn abort(&self) {
        self.control.abort();
    }

    /// Takes the failure recorded inside a backward pass, if any (a backward node cannot
    /// return an error: it records it here and gives zero gradients).
    pub fn take_failure(&self) -> Option<ParallelError> {
        self.failure.lock().ok().and_then(|mut slot| slot.take())
    }

    pub(super) fn record_failure(&self, error: ParallelError) {
        log::error!(
            "rank {}: Ulysses all-to-all backward failed: {error}",
            self.rank
        );
        self.control.abort();
        if let Ok(mut slot) = self.failure.lock()
            && slot.is_none()
        {
            *slot = Some(error);
        }
    }

    /// The all-to-all tagged `tag`: `parts[j]` goes to position `j`; returns the part each
    /// position sent here, in position order (this position's own part included), on this
    /// endpoint's device.
    pub(super) fn all_to_all(
        &self,
        tag: UlyssesTag,
        parts: Vec<FloatTensor<B>>,
    ) -> Result<Vec<FloatTensor<B>>, ParallelError> {
        let mut own = None;
        for (target, part) in parts.into_iter().enumerate() {
            if target == self.position {
                own = Some(part);
                continue;
            }
            self.sent_bytes
                .fetch_add(tensor_bytes(part.shape(), part.dtype()), Ordering::Relaxed);
            self.peers[target]
                .as_ref()
                .ok_or_else(|| ParallelError::PeerGone {
                    rank: self.rank,
                    waiting_for: format!("Ulysses position {target} ({tag})"),
                })?
                .send(UlyssesMessage {
                    source: self.position,
                    tag,
                    part,
                })
                .map_err(|_| ParallelError::PeerGone {
                    rank: self.rank,
                    waiting_for: format!("Ulysses position {target} ({tag})"),
                })?;
        }
        (0..self.size)
            .map(|source| {
                if source == self.position {
                    own.take().ok_or_else(|| ParallelError::OutOfOrder {
                        rank: self.rank,
                        expected: format!("{} parts, one per position", self.size),
                        got: "fewer".into(),
                    })
                } else {
                    self.receive(source, tag)
                }
            })
            .collect()
    }

    /// The part `source` sent with `tag`: kept from an earlier receive, or the next messages
    /// until it comes (others are kept for their own receive).
    fn receive(&self, source: usize, tag: UlyssesTag) -> Result<FloatTensor<B>, ParallelError> {
        let poisoned = |what: &str| ParallelError::WorkerPanicked {
            rank: self.rank,
            message: format!("Ulysses {what} lock poisoned"),
        };
        if let Some(part) = self
            .early
            .lock()
            .map_err(|_| poisoned("early parts"))?
            .remove(&(source, tag))
        {
            return Ok(B::float_to_device(part, &self.device));
        }
        let inbox = self.inbox.lock().map_err(|_| poisoned("inbox"))?;
        loop {
            let message = receive(&inbox, &self.control, self.rank, || {
                format!("position {source}'s part of the {tag}")
            })?;
            if message.source == source && message.tag == tag {
                return Ok(B::float_to_device(message.part, &self.device));
            }
            self.early
                .lock()
                .map_err(|_| poisoned("early parts"))?
                .insert((message.source, message.tag), message.part);
        }
    }
}

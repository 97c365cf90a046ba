//! [`UlyssesEndpoint`]: one position's channels of a Ulysses group (a channel to every other
//! position, one inbox) and the all-to-all over them.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn::tensor::TensorMetadata;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use super::message::{UlyssesMessage, UlyssesTag};
use crate::ParallelError;
use crate::context::tensor_bytes;
use crate::group_endpoint::{GroupEndpoint, GroupLinks};

/// One position's endpoint of a Ulysses group: a sender to every position, its inbox, the
/// parts that arrived before they were awaited, and where failures inside a backward pass are
/// recorded.
pub type UlyssesEndpoint<B> = GroupEndpoint<B, UlyssesLinks<B>>;

/// The channels of a Ulysses position: a sender to every other position, its inbox, and the
/// parts that arrived before they were awaited.
pub struct UlyssesLinks<B: Backend> {
    /// A sender to every other position (`None` at this one, so the inbox closes once every
    /// other position is gone).
    peers: Vec<Option<Sender<UlyssesMessage<B>>>>,
    inbox: Mutex<Receiver<UlyssesMessage<B>>>,
    early: Mutex<HashMap<(usize, UlyssesTag), FloatTensor<B>>>,
}

impl<B: Backend> GroupLinks for UlyssesLinks<B> {
    const NAME: &'static str = "UlyssesEndpoint";
    const BACKWARD: &'static str = "Ulysses all-to-all backward";

    fn connect(size: usize) -> Vec<Self> {
        let (senders, inboxes): (Vec<Sender<UlyssesMessage<B>>>, Vec<_>) = (0..size).map(|_| channel()).unzip();
        inboxes
            .into_iter()
            .enumerate()
            .map(|(position, inbox)| UlyssesLinks {
                peers: senders
                    .iter()
                    .enumerate()
                    .map(|(target, sender)| (target != position).then(|| sender.clone()))
                    .collect(),
                inbox: Mutex::new(inbox),
                early: Mutex::new(HashMap::new()),
            })
            .collect()
    }
}

impl<B: Backend> UlyssesEndpoint<B> {
    /// A standalone group of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`. Hand one endpoint to each thread.
    pub fn group(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        Self::standalone(devices, timeout)
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
            self.count_sent(tensor_bytes(part.shape(), part.dtype()));
            self.links.peers[target]
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
        if let Some(part) = self
            .links
            .early
            .lock()
            .map_err(|_| self.poisoned("Ulysses early parts"))?
            .remove(&(source, tag))
        {
            return Ok(B::float_to_device(part, &self.device));
        }
        let inbox = self.links.inbox.lock().map_err(|_| self.poisoned("Ulysses inbox"))?;
        loop {
            let message = self.wait(&inbox, || format!("position {source}'s part of the {tag}"))?;
            if message.source == source && message.tag == tag {
                return Ok(B::float_to_device(message.part, &self.device));
            }
            self.links
                .early
                .lock()
                .map_err(|_| self.poisoned("Ulysses early parts"))?
                .insert((message.source, message.tag), message.part);
        }
    }
}

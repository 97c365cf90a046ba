//! [`GroupEndpoint`]: one position of a group of mesh ranks that exchange tensors over channels,
//! a context-parallel ring ([`RingEndpoint`](crate::RingEndpoint)) or a Ulysses group
//! ([`UlyssesEndpoint`](crate::UlyssesEndpoint)). What every kind of group shares lives here:
//! the position and rank, the abort switch, the failure recorded inside a backward pass, and
//! the wait and byte counters. The channels are the kind's [`GroupLinks`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::tensor::backend::Backend;

use crate::ParallelError;
use crate::mesh::{Control, receive};

/// The channels of one position of a kind of group, and how a group of them is wired.
pub trait GroupLinks: Sized {
    /// The kind's name in logs and debug output (`"RingEndpoint"`).
    const NAME: &'static str;
    /// What the kind's backward pass is called when a failure inside it is logged
    /// (`"ring attention backward"`).
    const BACKWARD: &'static str;

    /// The links of every position of a group of `size` positions, in position order.
    fn connect(size: usize) -> Vec<Self>;
}

/// One position's endpoint of a group of mesh ranks: its place in the group, its device, its
/// channels `L`, and where failures inside the backward pass are recorded.
///
/// Build a group with the kind's standalone constructor ([`RingEndpoint::ring`](crate::RingEndpoint::ring),
/// [`UlyssesEndpoint::group`](crate::UlyssesEndpoint::group); one endpoint per thread) or let a
/// [`ParallelTrainer`](crate::ParallelTrainer) build its mesh.
pub struct GroupEndpoint<B: Backend, L> {
    pub(crate) position: usize,
    pub(crate) size: usize,
    pub(crate) rank: usize,
    pub(crate) device: B::Device,
    pub(crate) links: L,
    control: Arc<Control>,
    failure: Mutex<Option<ParallelError>>,
    /// Time spent waiting for other positions, in nanoseconds.
    waited_nanos: AtomicU64,
    /// Bytes of the tensors sent to other positions.
    sent_bytes: AtomicU64,
}

impl<B: Backend, L: GroupLinks> fmt::Debug for GroupEndpoint<B, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(L::NAME)
            .field("position", &self.position)
            .field("size", &self.size)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, L: GroupLinks> GroupEndpoint<B, L> {
    /// A standalone group of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`.
    pub(crate) fn standalone(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        let control = Arc::new(Control::new(timeout));
        let ranks: Vec<usize> = (0..devices.len()).collect();
        Self::build(&ranks, devices, &control)
    }

    /// Endpoints for the group of mesh ranks `ranks` (in position order) on `devices`.
    pub(crate) fn build(ranks: &[usize], devices: &[B::Device], control: &Arc<Control>) -> Vec<Arc<Self>> {
        L::connect(ranks.len())
            .into_iter()
            .enumerate()
            .map(|(position, links)| {
                Arc::new(Self {
                    position,
                    size: ranks.len(),
                    rank: ranks[position],
                    device: devices[position].clone(),
                    links,
                    control: control.clone(),
                    failure: Mutex::new(None),
                    waited_nanos: AtomicU64::new(0),
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

    /// Total time this endpoint spent waiting for messages of other positions, in seconds.
    pub fn waited_seconds(&self) -> f64 {
        self.waited_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Total bytes of the tensors (keys, values, masks, gradients, all-to-all parts) this
    /// endpoint sent to other positions.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes.load(Ordering::Relaxed)
    }

    /// Stops every endpoint of this group (their waits return [`ParallelError::Aborted`]).
    pub fn abort(&self) {
        self.control.abort();
    }

    /// Takes the failure recorded inside a backward pass, if any. A backward node cannot
    /// return an error: it records it here, gives zero gradients, and the caller checks after
    /// `backward()`.
    pub fn take_failure(&self) -> Option<ParallelError> {
        self.failure.lock().ok().and_then(|mut slot| slot.take())
    }

    /// Records a failure inside a backward pass (the first one is kept) and aborts the group.
    pub(crate) fn record_failure(&self, error: ParallelError) {
        log::error!("rank {}: {} failed: {error}", self.rank, L::BACKWARD);
        self.control.abort();
        if let Ok(mut slot) = self.failure.lock()
            && slot.is_none()
        {
            *slot = Some(error);
        }
    }

    /// Counts `bytes` sent to another position.
    pub(crate) fn count_sent(&self, bytes: u64) {
        self.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The next message on `inbox`, counting the wait; gives up when the group aborts, the
    /// senders are gone or the timeout passes (`what` names the awaited message in the error).
    pub(crate) fn wait<T>(&self, inbox: &Receiver<T>, what: impl Fn() -> String) -> Result<T, ParallelError> {
        let started = Instant::now();
        let message = receive(inbox, &self.control, self.rank, what);
        self.waited_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        message
    }

    /// The error of a lock poisoned by a panicking thread (`what` names the lock).
    pub(crate) fn poisoned(&self, what: &str) -> ParallelError {
        ParallelError::WorkerPanicked {
            rank: self.rank,
            message: format!("{what} lock poisoned"),
        }
    }
}

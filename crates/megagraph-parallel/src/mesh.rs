//! The `pp x cp x dp` mesh: rank numbering, the channels between neighbours, and the shared
//! abort flag that stops every wait when one worker fails.
//!
//! Ranks are numbered with the context rank fastest, then the data rank, then the stage:
//! `rank = (stage * dp + dp_rank) * cp + cp_rank`, so the positions of a ring are adjacent.
//! Burn 0.21 has no point-to-point operations; neighbours talk over `std::sync::mpsc` channels
//! carrying tensors, moved to the receiver's device on arrival.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::context::RingEndpoint;
use crate::ulysses::UlyssesEndpoint;
use crate::{ParallelConfig, ParallelError};

/// How often a blocked receive looks at the abort flag.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Coordinates of a rank in the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RankCoord {
    /// Pipeline stage, `0..pp`.
    pub stage: usize,
    /// Position in the context-parallel ring, `0..cp`.
    pub cp_rank: usize,
    /// Data-parallel replica, `0..dp`.
    pub dp_rank: usize,
}

/// The `pp x cp x dp` grid of a mesh's ranks and their numbering (the degrees of a
/// [`ParallelConfig`] without its schedule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RankGrid {
    /// Pipeline degree.
    pub pp: usize,
    /// Context-parallel degree.
    pub cp: usize,
    /// Data-parallel degree.
    pub dp: usize,
}

impl RankGrid {
    /// The shape of `config`'s mesh.
    pub fn of(config: &ParallelConfig) -> Self {
        Self {
            pp: config.pp,
            cp: config.cp,
            dp: config.dp,
        }
    }

    /// The number of ranks, `pp * cp * dp`.
    pub fn world(&self) -> usize {
        self.pp * self.cp * self.dp
    }

    /// The rank at `coord`: `(stage * dp + dp_rank) * cp + cp_rank`.
    pub fn rank(&self, coord: RankCoord) -> usize {
        (coord.stage * self.dp + coord.dp_rank) * self.cp + coord.cp_rank
    }

    /// The coordinates of `rank` (`rank < world()`).
    pub fn coord(&self, rank: usize) -> RankCoord {
        RankCoord {
            stage: rank / (self.cp * self.dp),
            dp_rank: (rank / self.cp) % self.dp,
            cp_rank: rank % self.cp,
        }
    }

    /// All coordinates in rank order.
    pub fn coords(&self) -> impl Iterator<Item = RankCoord> + '_ {
        (0..self.world()).map(|rank| self.coord(rank))
    }
}

/// State shared by every rank of a mesh: the abort flag and the patience of a receive.
#[derive(Debug)]
pub(crate) struct Control {
    abort: AtomicBool,
    pub(crate) timeout: Duration,
}

impl Control {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            abort: AtomicBool::new(false),
            timeout,
        }
    }

    /// Asks every rank to stop.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }
}

/// Waits for a message on `rx` and gives up when the mesh aborts, the sender is gone, or
/// `control`'s timeout passes. `what` names the awaited message in the error.
pub(crate) fn receive<T>(
    rx: &Receiver<T>,
    control: &Control,
    rank: usize,
    what: impl Fn() -> String,
) -> Result<T, ParallelError> {
    let started = Instant::now();
    loop {
        if control.aborted() {
            return Err(ParallelError::Aborted { rank });
        }
        match rx.recv_timeout(POLL) {
            Ok(message) => return Ok(message),
            Err(RecvTimeoutError::Timeout) => {
                let waited = started.elapsed();
                if waited > control.timeout {
                    return Err(ParallelError::PeerTimeout {
                        rank,
                        waiting_for: what(),
                        seconds: waited.as_secs_f64(),
                    });
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ParallelError::PeerGone {
                    rank,
                    waiting_for: what(),
                });
            }
        }
    }
}

/// An activation sent from stage `i` to stage `i + 1`, with the value of the spatial table and
/// the edge encoding's bias (which every stage's layers read; both are made on stage 0).
#[derive(Debug)]
pub(crate) struct Activation<B: Backend> {
    pub step: u64,
    pub micro: usize,
    /// `[batch, block, hidden]`.
    pub x: Tensor<B, 3>,
    /// `[buckets, heads]`.
    pub table: Tensor<B, 2>,
    /// The edge encoding's dense bias, this context block's rows `[batch, heads, block, seq]`
    /// (`block = seq` with `cp = 1`), computed once per micro-batch on stage 0; `None` without an
    /// edge encoding.
    pub dense: Option<Tensor<B, 4>>,
}

/// The gradient of an [`Activation`], sent back from stage `i + 1` to stage `i`.
#[derive(Debug)]
pub(crate) struct ActivationGrad<B: Backend> {
    pub step: u64,
    pub micro: usize,
    /// `[batch, block, hidden]`.
    pub x: Tensor<B, 3>,
    /// `[buckets, heads]`: the table gradient of this and every later stage.
    pub table: Tensor<B, 2>,
    /// `[batch, heads, block, seq]`: the dense bias gradient of this and every later stage
    /// (`None` without an edge encoding).
    pub dense: Option<Tensor<B, 4>>,
}

/// A message between pipeline stages, tagged with the micro-batch it belongs to.
pub(crate) trait StageMessage {
    /// The step and the micro-batch of the message.
    fn tag(&self) -> (u64, usize);
}

impl<B: Backend> StageMessage for Activation<B> {
    fn tag(&self) -> (u64, usize) {
        (self.step, self.micro)
    }
}

impl<B: Backend> StageMessage for ActivationGrad<B> {
    fn tag(&self) -> (u64, usize) {
        (self.step, self.micro)
    }
}

/// One rank's channels.
pub(crate) struct Links<B: Backend> {
    /// Activations from the previous stage (stages `> 0`).
    pub activation_in: Option<Receiver<Activation<B>>>,
    /// Activations to the next stage (stages `< pp - 1`).
    pub activation_out: Option<Sender<Activation<B>>>,
    /// Gradients from the next stage (stages `< pp - 1`).
    pub grad_in: Option<Receiver<ActivationGrad<B>>>,
    /// Gradients to the previous stage (stages `> 0`).
    pub grad_out: Option<Sender<ActivationGrad<B>>>,
    /// This rank's context-parallel ring endpoint.
    pub ring: Arc<RingEndpoint<B>>,
    /// This rank's endpoint of its context group's Ulysses all-to-alls.
    pub ulysses: Arc<UlyssesEndpoint<B>>,
}

/// Builds every rank's channels, in rank order.
pub(crate) fn build_links<B: Backend>(
    shape: RankGrid,
    devices: &[B::Device],
    control: &Arc<Control>,
) -> Vec<Links<B>> {
    let world = shape.world();
    let mut links: Vec<Option<Links<B>>> = (0..world).map(|_| None).collect();
    let mut rings: Vec<Option<Arc<RingEndpoint<B>>>> = (0..world).map(|_| None).collect();
    let mut groups: Vec<Option<Arc<UlyssesEndpoint<B>>>> = (0..world).map(|_| None).collect();
    for stage in 0..shape.pp {
        for dp_rank in 0..shape.dp {
            let ranks: Vec<usize> = (0..shape.cp)
                .map(|cp_rank| {
                    shape.rank(RankCoord {
                        stage,
                        cp_rank,
                        dp_rank,
                    })
                })
                .collect();
            let ring_devices: Vec<B::Device> =
                ranks.iter().map(|&rank| devices[rank].clone()).collect();
            for (endpoint, &rank) in RingEndpoint::build(&ranks, &ring_devices, control)
                .into_iter()
                .zip(&ranks)
            {
                rings[rank] = Some(endpoint);
            }
            for (endpoint, &rank) in UlyssesEndpoint::build(&ranks, &ring_devices, control)
                .into_iter()
                .zip(&ranks)
            {
                groups[rank] = Some(endpoint);
            }
        }
    }
    let mut activation_rx: Vec<Option<Receiver<Activation<B>>>> =
        (0..world).map(|_| None).collect();
    let mut activation_tx: Vec<Option<Sender<Activation<B>>>> = (0..world).map(|_| None).collect();
    let mut grad_rx: Vec<Option<Receiver<ActivationGrad<B>>>> = (0..world).map(|_| None).collect();
    let mut grad_tx: Vec<Option<Sender<ActivationGrad<B>>>> = (0..world).map(|_| None).collect();
    for coord in shape.coords() {
        if coord.stage + 1 == shape.pp {
            continue;
        }
        let here = shape.rank(coord);
        let next = shape.rank(RankCoord {
            stage: coord.stage + 1,
            ..coord
        });
        let (tx, rx) = channel();
        activation_tx[here] = Some(tx);
        activation_rx[next] = Some(rx);
        let (tx, rx) = channel();
        grad_tx[next] = Some(tx);
        grad_rx[here] = Some(rx);
    }
    for rank in 0..world {
        if let (Some(ring), Some(ulysses)) = (rings[rank].take(), groups[rank].take()) {
            links[rank] = Some(Links {
                activation_in: activation_rx[rank].take(),
                activation_out: activation_tx[rank].take(),
                grad_in: grad_rx[rank].take(),
                grad_out: grad_tx[rank].take(),
                ring,
                ulysses,
            });
        }
    }
    links.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_coordinates_are_inverse() {
        let shape = RankGrid {
            pp: 2,
            cp: 3,
            dp: 2,
        };
        assert_eq!(shape.world(), 12);
        for rank in 0..shape.world() {
            assert_eq!(shape.rank(shape.coord(rank)), rank);
        }
        assert_eq!(
            shape.coord(7),
            RankCoord {
                stage: 1,
                cp_rank: 1,
                dp_rank: 0
            }
        );
    }

    #[test]
    fn receive_stops_on_abort_and_on_a_lost_sender() {
        let control = Control::new(Duration::from_secs(60));
        let (tx, rx) = channel::<u32>();
        control.abort();
        assert_eq!(
            receive(&rx, &control, 3, || "x".into()),
            Err(ParallelError::Aborted { rank: 3 })
        );
        let control = Control::new(Duration::from_secs(60));
        drop(tx);
        assert!(matches!(
            receive(&rx, &control, 1, || "x".into()),
            Err(ParallelError::PeerGone { rank: 1, .. })
        ));
        let control = Control::new(Duration::from_millis(50));
        let (_tx, rx) = channel::<u32>();
        assert!(matches!(
            receive(&rx, &control, 2, || "x".into()),
            Err(ParallelError::PeerTimeout { rank: 2, .. })
        ));
    }
}

//! How the trainer talks to its workers: sending commands, collecting replies, stopping the
//! mesh on the first failure and shutting it down.

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use burn::tensor::backend::AutodiffBackend;

use super::parallel_trainer::ParallelTrainer;
use crate::context::ContextParallelBackend;
use crate::gradients;
use crate::worker::{Command, Reply, ReplyBody};
use crate::ParallelError;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// How long the coordinator waits for the other ranks to report after a first failure.
const FAILURE_GRACE: Duration = Duration::from_secs(10);
/// How often the coordinator looks at its replies.
const POLL: Duration = Duration::from_millis(20);

impl<B: ContextParallelBackend> ParallelTrainer<B> {
    /// Whether a failure resets the process's collective to release waiting ranks: in a
    /// single-process mesh that all-reduces. Not in multi-node mode: burn-collective's server
    /// may then be gone or blocked on another node (its client would panic or block), and the
    /// ranks' waits on it are guarded instead.
    pub(super) fn resets(&self) -> bool {
        self.reduces && self.nodes.is_none()
    }

    pub(super) fn send(&mut self, rank: usize, command: Command<B>) -> Result<(), ParallelError> {
        if self.commands[rank].send(command).is_err() {
            let error = ParallelError::PeerGone {
                rank,
                waiting_for: "commands (the worker thread ended)".to_string(),
            };
            self.stop(error.clone());
            return Err(error);
        }
        Ok(())
    }

    /// Records the first failure and stops every rank.
    pub(super) fn stop(&mut self, error: ParallelError) {
        self.control.abort();
        if self.resets() {
            // releases ranks blocked in an all-reduce with a failed peer
            gradients::reset::<Inner<B>>();
        }
        if self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    /// Waits for one reply from each of `ranks`. On a failure, stops the mesh, waits a little
    /// for the others (so the root cause wins over "aborted" reports) and returns it.
    pub(super) fn collect(
        &mut self,
        ranks: &[usize],
        expected: impl Fn(&ReplyBody<B>) -> bool,
    ) -> Result<Vec<(usize, ReplyBody<B>)>, ParallelError> {
        let mut pending: Vec<bool> = vec![false; self.shape.world()];
        for &rank in ranks {
            pending[rank] = true;
        }
        let mut remaining = ranks.len();
        let mut got = Vec::with_capacity(ranks.len());
        let mut first: Option<ParallelError> = None;
        let mut failed_at: Option<Instant> = None;
        while remaining > 0 {
            match self.replies.recv_timeout(POLL) {
                Ok(Reply { rank, body }) => {
                    if rank < pending.len() && pending[rank] {
                        pending[rank] = false;
                        remaining -= 1;
                    }
                    match body {
                        Ok(body) if expected(&body) => got.push((rank, body)),
                        Ok(_) => {
                            let error = ParallelError::OutOfOrder {
                                rank,
                                expected: "the reply to the current command".into(),
                                got: "another reply".into(),
                            };
                            first = Some(prefer(first, error));
                        }
                        Err(error) => {
                            if failed_at.is_none() {
                                failed_at = Some(Instant::now());
                                self.control.abort();
                                if self.resets() {
                                    gradients::reset::<Inner<B>>();
                                }
                            }
                            first = Some(prefer(first, error));
                        }
                    }
                }
                // no overall deadline: a step may legitimately take long, and every wait of a
                // worker on a peer has its own timeout
                Err(RecvTimeoutError::Timeout) => {
                    if failed_at.is_some_and(|at| at.elapsed() > FAILURE_GRACE) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if first.is_none() && remaining > 0 {
            let rank = pending.iter().position(|&p| p).unwrap_or(0);
            first = Some(ParallelError::PeerGone {
                rank,
                waiting_for: "a reply (the worker thread ended)".into(),
            });
        }
        match first {
            Some(error) => {
                self.stop(error.clone());
                Err(error)
            }
            None => Ok(got),
        }
    }
}

/// The more informative of two failures: a root cause over a consequence, else the first.
fn prefer(first: Option<ParallelError>, next: ParallelError) -> ParallelError {
    match first {
        Some(first) if !first.is_consequence() || next.is_consequence() => first,
        _ => next,
    }
}

impl<B: ContextParallelBackend> Drop for ParallelTrainer<B> {
    fn drop(&mut self) {
        for command in &self.commands {
            let _ = command.send(Command::Shutdown);
        }
        self.commands.clear();
        let deadline = Instant::now() + FAILURE_GRACE;
        for handle in self.handles.drain(..) {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            if handle.is_finished() {
                let _ = handle.join();
            } else {
                log::warn!("a worker thread did not stop; leaving it behind");
                self.control.abort();
            }
        }
        if self.failure.is_some() && self.resets() {
            gradients::reset::<Inner<B>>();
        }
        // release the collective only after every rank left it
        drop(self.lease.take());
    }
}

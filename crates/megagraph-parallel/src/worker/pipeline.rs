//! A rank's messages to and from its neighbouring pipeline stages.

use std::sync::mpsc::{Receiver, Sender};
use std::time::Instant;

use super::rank::Worker;
use crate::ParallelError;
use crate::context::ContextParallelBackend;
use crate::mesh::{StageMessage, receive};

impl<B: ContextParallelBackend> Worker<B> {
    /// [`receive`], counting the wait.
    fn timed_receive<T>(
        &self,
        link: &Receiver<T>,
        what: impl Fn() -> String,
    ) -> Result<T, ParallelError> {
        let started = Instant::now();
        let message = receive(link, &self.control, self.rank, what);
        self.waited.set(self.waited.get() + started.elapsed());
        message
    }

    /// Receives the `what` (`"activation"` or `"gradient"`) of micro-batch `micro` of step
    /// `step` from stage `stage` on `link`, counting the wait.
    ///
    /// # Errors
    ///
    /// An internal error without a link, a communication failure, or
    /// [`ParallelError::OutOfOrder`] for the message of another micro-batch.
    pub(super) fn receive_from_stage<T: StageMessage>(
        &self,
        link: Option<&Receiver<T>>,
        what: &str,
        stage: usize,
        step: u64,
        micro: usize,
    ) -> Result<T, ParallelError> {
        let link = link.ok_or_else(|| self.internal(&format!("no {what} link")))?;
        let expected =
            || format!("the {what} of step {step} micro-batch {micro} from stage {stage}");
        let message = self.timed_receive(link, expected)?;
        let (got_step, got_micro) = message.tag();
        if got_step != step || got_micro != micro {
            return Err(ParallelError::OutOfOrder {
                rank: self.rank,
                expected: expected(),
                got: format!("step {got_step} micro-batch {got_micro}"),
            });
        }
        Ok(message)
    }

    /// Sends `message`, the `what` of a micro-batch, to stage `stage` on `link`.
    ///
    /// # Errors
    ///
    /// [`ParallelError::PeerGone`] when that stage's rank stopped.
    pub(super) fn send_to_stage<T>(
        &self,
        link: &Sender<T>,
        message: T,
        what: &str,
        stage: usize,
    ) -> Result<(), ParallelError> {
        link.send(message).map_err(|_| ParallelError::PeerGone {
            rank: self.rank,
            waiting_for: format!("stage {stage} ({what})"),
        })
    }
}

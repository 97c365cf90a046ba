//! [`WriteBack`]: DepBloom's critical-path optimization of a worker's memory write-back.
//!
//! After each step a worker writes its batch's memory and mails to its node-state replica.
//! The batches are known ahead of time (the epoch's plan), so the write is split by node:
//! - **hot** rows, of the nodes the worker's next batch reads (its roots, negatives and sampled
//!   neighbours), are written at once, on the critical path;
//! - **cold** rows go to a background thread, which writes them while the worker goes on with
//!   the next batch's sampling, forward pass and all-reduce.
//!
//! **Ordering.** A cold node is not read by the next batch, so its write has one whole step to
//! complete: before a batch reads the state, the worker waits for every write issued before
//! the previous step's ([`fence`](WriteBack::fence)), and a debug assertion checks that none of
//! the nodes the batch reads still has a write pending ([`pending_among`](WriteBack::pending_among)).
//! Before a memory exchange and at the epoch's end every write completes
//! ([`flush`](WriteBack::flush)). Writes of different nodes commute and a node's rows keep
//! their order (one background thread, jobs in order), so deferral changes when the state is
//! written, never what a read finds.
//!
//! **Locks.** The background thread writes under the state's lock; the worker never waits for
//! a write while it holds it.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_models::temporal::MemoryWrite;
use megagraph_parallel::threads::panic_message;

use crate::error::{Result, TemporalTrainError};
use crate::state::NodeState;

/// Some rows of a batch's memory write, with the node each belongs to, in event order.
struct RowWrite<B: Backend> {
    ids: Vec<usize>,
    memory: Tensor<B, 2>,
    mails: Tensor<B, 2>,
    time: Tensor<B, 1>,
}

impl<B: Backend> RowWrite<B> {
    /// The rows of `write` (events with endpoints `src`, `dst`) at `positions` (rows of the
    /// interleaved write: `2i` the source of event `i`, `2i + 1` its destination), in order.
    fn select(write: &MemoryWrite<B>, ids: &[usize], positions: &[usize]) -> Self {
        let device = write.memory.device();
        let index: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
        let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [positions.len()]), &device);
        Self {
            ids: positions.iter().map(|&p| ids[p]).collect(),
            memory: write.memory.clone().select(0, index.clone()),
            mails: write.mails.clone().select(0, index.clone()),
            time: write.time.clone().select(0, index),
        }
    }

    /// Writes the rows to `state`, as [`MemoryWrite::apply`] does (a node's last row wins).
    fn apply(self, state: &mut NodeState<B>) -> Result<()> {
        state.memory.write(&self.ids, self.memory, self.time.clone())?;
        state.mailbox.write(&self.ids, self.mails, self.time)?;
        Ok(())
    }
}

/// A cold write and its ticket.
struct Job<B: Backend> {
    ticket: u64,
    rows: RowWrite<B>,
}

/// What the background thread has done.
#[derive(Default)]
struct Progress {
    /// Every job up to this ticket is written.
    completed: u64,
    /// Per node with a write not yet done, the ticket of its latest one.
    pending: HashMap<usize, u64>,
    /// Why the background thread stopped, if it failed.
    failure: Option<String>,
}

/// Progress, shared with the background thread.
#[derive(Default)]
struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A worker's node-state replica with deferred (cold) write-backs; see the module docs.
pub(crate) struct WriteBack<B: Backend> {
    /// The worker whose state this is.
    worker: usize,
    state: Arc<Mutex<NodeState<B>>>,
    shared: Arc<Shared>,
    /// The background thread's queue (`None`: every write is immediate).
    jobs: Option<Sender<Job<B>>>,
    thread: Option<JoinHandle<()>>,
    /// Tickets issued so far.
    issued: u64,
    /// Tickets issued before the latest write: what the next read waits for.
    fence_ticket: u64,
}

impl<B: Backend> WriteBack<B> {
    /// Takes over worker `worker`'s `state`; with `deferred`, cold rows are written by a
    /// background thread that waits `delay` before each write (a test hook; zero in training).
    pub fn new(worker: usize, state: NodeState<B>, deferred: bool, delay: Duration) -> Self {
        let state = Arc::new(Mutex::new(state));
        let shared = Arc::new(Shared::default());
        let (jobs, thread) = if deferred {
            let (sender, receiver) = channel::<Job<B>>();
            let (state, shared) = (Arc::clone(&state), Arc::clone(&shared));
            let thread = std::thread::Builder::new()
                .name(format!("megagraph-write-back-{worker}"))
                .spawn(move || {
                    for job in receiver {
                        std::thread::sleep(delay);
                        let written = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            let mut state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                            job.rows.apply(&mut state).map_err(|err| err.to_string())
                        }))
                        .unwrap_or_else(|payload| Err(panic_message(payload.as_ref())));
                        let mut progress = shared.lock();
                        match written {
                            Ok(()) => {
                                progress.completed = job.ticket;
                                progress.pending.retain(|_, ticket| *ticket > job.ticket);
                            }
                            Err(message) => progress.failure = Some(message),
                        }
                        shared.changed.notify_all();
                    }
                })
                .ok();
            match thread {
                Some(thread) => (Some(sender), Some(thread)),
                // no thread to defer to: write everything at once
                None => (None, None),
            }
        } else {
            (None, None)
        };
        Self {
            worker,
            state,
            shared,
            jobs,
            thread,
            issued: 0,
            fence_ticket: 0,
        }
    }

    /// The state, for reading or immediate writes. Call [`fence`](Self::fence) before reading.
    pub fn lock(&self) -> MutexGuard<'_, NodeState<B>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `write` (events with endpoints `src`, `dst`): the rows of nodes in `hot` now,
    /// the others in the background (all now when deferral is off).
    ///
    /// # Errors
    ///
    /// An id out of range or a shape that disagrees with the state, and a failed background
    /// thread.
    pub fn write(&mut self, write: MemoryWrite<B>, src: &[usize], dst: &[usize], hot: &HashSet<usize>) -> Result<()> {
        let ids: Vec<usize> = src.iter().zip(dst).flat_map(|(&s, &d)| [s, d]).collect();
        let Some(jobs) = &self.jobs else {
            let mut guard = self.lock();
            let state = &mut *guard;
            return Ok(write.apply(src, dst, &mut state.memory, &mut state.mailbox)?);
        };
        let (now, later): (Vec<usize>, Vec<usize>) = (0..ids.len()).partition(|&p| hot.contains(&ids[p]));
        self.fence_ticket = self.issued;
        if !later.is_empty() {
            let rows = RowWrite::select(&write, &ids, &later);
            self.issued += 1;
            let ticket = self.issued;
            self.shared.lock().pending.extend(rows.ids.iter().map(|&id| (id, ticket)));
            if jobs.send(Job { ticket, rows }).is_err() {
                return Err(self.failed());
            }
        }
        if !now.is_empty() {
            RowWrite::select(&write, &ids, &now).apply(&mut self.lock())?;
        }
        Ok(())
    }

    /// Waits for every write issued before the latest [`write`](Self::write): what a batch
    /// must see before it reads the state (the latest write's cold rows are not read by it).
    ///
    /// # Errors
    ///
    /// A failed background thread.
    pub fn fence(&self) -> Result<()> {
        self.wait_for(self.fence_ticket)
    }

    /// Waits for every write issued.
    ///
    /// # Errors
    ///
    /// A failed background thread.
    pub fn flush(&self) -> Result<()> {
        self.wait_for(self.issued)
    }

    /// The nodes among `nodes` with a write not yet done (the ordering check: empty before any
    /// read of `nodes`).
    pub fn pending_among(&self, nodes: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let progress = self.shared.lock();
        let mut pending: Vec<usize> = nodes.into_iter().filter(|node| progress.pending.contains_key(node)).collect();
        pending.sort_unstable();
        pending.dedup();
        pending
    }

    /// Completes every write, stops the background thread and hands the state back.
    ///
    /// # Errors
    ///
    /// A failed background thread.
    pub fn into_state(mut self) -> Result<NodeState<B>> {
        self.flush()?;
        self.stop();
        // tensors are shared handles: the clone copies no rows
        Ok(self.lock().clone())
    }

    fn wait_for(&self, ticket: u64) -> Result<()> {
        let mut progress = self.shared.lock();
        while progress.completed < ticket && progress.failure.is_none() {
            progress = self
                .shared
                .changed
                .wait(progress)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        match progress.failure.clone() {
            Some(message) => Err(write_back_failure(self.worker, message)),
            None => Ok(()),
        }
    }

    fn failed(&self) -> TemporalTrainError {
        let message = self.shared.lock().failure.clone();
        write_back_failure(self.worker, message.unwrap_or_else(|| "it stopped".into()))
    }

    fn stop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // a panic was caught and reported as a failure already
            let _ = thread.join();
        }
    }
}

impl<B: Backend> Drop for WriteBack<B> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_back_failure(worker: usize, message: String) -> TemporalTrainError {
    TemporalTrainError::Worker {
        worker,
        message: format!("the background memory write-back failed: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use megagraph_models::temporal::{Mailbox, NodeMemory};

    fn state<B: Backend>(device: &B::Device) -> NodeState<B> {
        NodeState {
            memory: NodeMemory::new(6, 2, device),
            mailbox: Mailbox::new(6, 2, 4, device),
        }
    }

    /// The write of `events` (source, destination) with fresh memory rows.
    fn write<B: Backend>(events: &[(usize, usize)], seed: f32, device: &B::Device) -> MemoryWrite<B> {
        let n = events.len();
        let rows = |offset: f32| {
            let values: Vec<f32> = (0..2 * n).map(|i| seed * 10.0 + offset + i as f32 * 0.25).collect();
            Tensor::<B, 2>::from_data(TensorData::new(values, [n, 2]), device)
        };
        let time: Vec<f32> = (0..n).map(|i| seed + i as f32).collect();
        MemoryWrite::new(rows(0.0), rows(5.0), Tensor::from_data(TensorData::new(time, [n]), device), None)
    }

    fn ends(events: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>) {
        events.iter().copied().unzip()
    }

    #[test]
    fn cold_rows_complete_in_the_background_before_the_fence_returns() {
        let device = Default::default();
        let batches: [&[(usize, usize)]; 3] = [&[(0, 1), (2, 3), (0, 4)], &[(4, 5), (1, 2)], &[(3, 0)]];
        // each batch's hot set: the nodes of the next one
        let hot: Vec<HashSet<usize>> = vec![[4, 5, 1, 2].into(), [3, 0].into(), HashSet::new()];
        let mut reference = state::<Flex>(&device);
        let mut deferred = WriteBack::<Flex>::new(0, state(&device), true, Duration::from_millis(500));
        for (b, events) in batches.iter().enumerate() {
            let (src, dst) = ends(events);
            // before a batch reads, the fence completes what it could read
            deferred.fence().unwrap_or_else(|err| panic!("{err}"));
            assert!(deferred.pending_among(src.iter().chain(&dst).copied()).is_empty(), "batch {b}");
            write(events, b as f32, &device)
                .apply(&src, &dst, &mut reference.memory, &mut reference.mailbox)
                .unwrap_or_else(|err| panic!("{err}"));
            deferred
                .write(write(events, b as f32, &device), &src, &dst, &hot[b])
                .unwrap_or_else(|err| panic!("{err}"));
            if b == 0 {
                // the slow thread has not written the cold nodes 0 and 3 yet; hot 1, 2, 4 are written
                assert_eq!(deferred.pending_among(0..6), vec![0, 3]);
                let (hot_rows, _) = deferred.lock().memory.gather(&[1, 2, 4]).unwrap_or_else(|err| panic!("{err}"));
                let (want, _) = reference.memory.gather(&[1, 2, 4]).unwrap_or_else(|err| panic!("{err}"));
                assert_eq!(hot_rows.into_data().to_vec::<f32>().ok(), want.into_data().to_vec::<f32>().ok());
            }
        }
        let finished = deferred.into_state().unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(finished.to_data().ok(), reference.to_data().ok());
    }

    #[test]
    fn without_deferral_every_row_is_written_at_once() {
        let device = Default::default();
        let events = [(0, 1), (2, 3)];
        let (src, dst) = ends(&events);
        let mut immediate = WriteBack::<Flex>::new(0, state(&device), false, Duration::from_secs(60));
        immediate
            .write(write(&events, 1.0, &device), &src, &dst, &HashSet::new())
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(immediate.pending_among(0..6).is_empty());
        let mut reference = state::<Flex>(&device);
        write(&events, 1.0, &device)
            .apply(&src, &dst, &mut reference.memory, &mut reference.mailbox)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(immediate.lock().to_data().ok(), reference.to_data().ok());
    }
}

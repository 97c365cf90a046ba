//! The thread body of a rank.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::protocol::{Reply, WorkerSetup};
use super::rank::Worker;
use crate::ParallelError;
use crate::context::ContextParallelBackend;
use crate::threads::panic_message;

/// The thread body: runs the worker, turns a panic or an error into a reply, and stops the mesh
/// when this rank fails.
pub(crate) fn run<B: ContextParallelBackend>(setup: WorkerSetup<B>) {
    let rank = setup.rank;
    let replies = setup.replies.clone();
    let control = setup.control.clone();
    let (threads, pool_name) = (setup.threads, format!("megagraph-rank-{rank}"));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        crate::threads::run_in_pool(threads, &pool_name, || Worker::start(setup)?.serve())
    }));
    let error = match outcome {
        Ok(Ok(Ok(()))) => return,
        Ok(Ok(Err(error))) => error,
        Ok(Err(error)) => ParallelError::WorkerPanicked {
            rank,
            message: format!("cannot start its thread pool of {threads} threads: {error}"),
        },
        Err(panic) => ParallelError::WorkerPanicked {
            rank,
            message: panic_message(panic.as_ref()),
        },
    };
    if !error.is_consequence() {
        log::error!("rank {rank} failed: {error}");
    }
    control.abort();
    // the coordinator may be gone already; nothing else to tell
    let _ = replies.send(Reply {
        rank,
        body: Err(error),
    });
}

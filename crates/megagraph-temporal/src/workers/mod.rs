//! Multi-worker temporal training: `workers` threads, each with its own device, model replica,
//! optimizer and node-state replica, running one epoch by a [`TemporalScheme`].
//!
//! **Steps.** An epoch is a plan of steps (`plan`): at each step every worker runs its batch
//! (or none), the gradients are averaged over the workers that had one through
//! burn-collective (megagraph-parallel's [`ReplicaGradients`](megagraph_parallel::ReplicaGradients), the flat buffer of the Graph
//! Transformer's mesh), and every worker applies the same optimizer step: the replicas stay
//! equal, which is checked after every epoch. Then each worker writes its batch's deferred
//! memory update to its own state replica.
//!
//! **Ownership of node memory.** Each worker owns its replica of the node state, and only it
//! writes it between synchronization points. At a synchronization point the workers reconcile
//! through the [`MemoryStore`](store): each publishes the rows of the nodes it wrote since
//! the previous one; per node the row written by the **latest event** wins (ties: the lowest
//! worker); every worker copies in the rows it did not win. Per scheme:
//! - mini-batch: replicas equal at every global batch's start (the stale memory all read);
//!   an exchange after every step, so each node gets its last occurrence's write in the
//!   global batch, on top of the memory before it (DistTGL's rule);
//! - epoch: every worker writes the same events; worker 0's rows win at every step;
//! - memory: no exchange; each worker's replica is private (its own time segment), and the
//!   last segment's worker hands its memory to validation;
//! - DepBloom: within a window a worker writes only its shard's events (nodes it owns, and the
//!   other endpoint of its cross-shard events), reading the others' memory as of the
//!   window's start; the exchange at the window's end applies the latest event's row of every
//!   node, owned or shared.
//!
//! **Critical path** (DepBloom, [`TemporalTrainConfig::defers_write_back`](crate::TemporalTrainConfig::defers_write_back)):
//! the plan fixes every worker's batches ahead of time, so after a step a worker writes at once
//! only the memory of the nodes its next batch reads and leaves the rest to a background
//! thread, which completes it before the nodes' next read (`write_back.rs`). The numbers do
//! not change; the time a step waits does.
//!
//! At one worker every scheme runs exactly the single-worker loop (same batches, negatives,
//! samples and updates). The workers run their whole steps in parallel, forward and backward
//! passes included (see `worker.rs`). Progress reaches the observer once per epoch, not per
//! batch.

mod barrier;
mod plan;
mod replicas;
pub(crate) mod store;
mod worker;
mod write_back;
#[cfg(test)]
mod critical_path_tests;

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;
use megagraph_parallel::threads::{default_threads_per_rank, panic_message, run_in_pool};
use megagraph_parallel::{CollectiveLease, reset_collective};

use crate::error::{Result, TemporalTrainError};
use crate::observer::TemporalObserver;
use crate::state::NodeState;
use crate::scheme::TemporalScheme;
use crate::setup::Setup;
use plan::EpochPlan;
use store::MemoryStore;
use worker::{WorkerContext, WorkerOutcome, run_worker};

/// How long an epoch waits for another mesh of this process to release the collective.
const LEASE_PATIENCE: Duration = Duration::from_secs(600);

/// What one multi-worker epoch measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EpochCounters {
    /// Bytes of node rows published to and fetched from the store, over all workers.
    pub sync_bytes: usize,
    /// Events each worker trained on.
    pub events_per_worker: Vec<usize>,
    /// Seconds of the epoch's steps on the critical path (worker 0's step times: each ends
    /// when the next step can start).
    pub step_seconds: f64,
    /// Steps in the epoch.
    pub steps: usize,
}

/// The model, the mean batch loss, the state that leads into validation and the counters of
/// one multi-worker epoch.
pub(crate) struct EpochOutcome<B: AutodiffBackend> {
    pub model: TemporalModel<B>,
    pub loss: f64,
    pub state: Option<NodeState<B>>,
    pub counters: EpochCounters,
}

/// Trains epoch `epoch` of the run `setup` by `scheme` on `workers` workers, from `model` and
/// `optimizer` (which takes the workers' common optimizer state afterwards).
///
/// # Errors
///
/// A worker's failure (the first one that is not a consequence of another's), a collective
/// held by another mesh for too long, diverged replicas, or an observer's stop.
#[allow(clippy::too_many_arguments)]
pub(crate) fn train_epoch<B, O>(
    setup: &Setup<'_>,
    scheme: TemporalScheme,
    workers: usize,
    epoch: usize,
    model: TemporalModel<B>,
    optimizer: &mut O,
    device: &B::Device,
    observer: &mut dyn TemporalObserver,
) -> Result<EpochOutcome<B>>
where
    B: AutodiffBackend,
    O: Optimizer<TemporalModel<B>, B> + Clone + Send,
{
    let config = setup.config;
    let train = setup.data.split.train.clone();
    let plan = EpochPlan::new(scheme, workers, train, config.batch_size, setup.shards.as_ref(), epoch);
    observer.epoch_started(epoch, plan.steps.len());
    let _lease = CollectiveLease::acquire(LEASE_PATIENCE).ok_or_else(|| TemporalTrainError::Worker {
        worker: 0,
        message: "another mesh of this process holds the collective".into(),
    })?;
    reset_collective::<B::InnerBackend>();
    let store = MemoryStore::new(workers);
    let context = WorkerContext {
        setup,
        plan: &plan,
        store: &store,
        shares_memory: scheme.shares_memory(),
        critical_path: config.defers_write_back(),
    };
    let nodes = setup.data.stream.num_nodes();
    let results: Vec<Result<WorkerOutcome<B, O>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|rank| {
                let (model, optimizer, device) = (model.clone(), optimizer.clone(), device.clone());
                let context = &context;
                let spawned = std::thread::Builder::new()
                    .name(format!("megagraph-temporal-{rank}"))
                    .spawn_scoped(scope, move || {
                        let state = NodeState::<B>::for_model(&setup.model, nodes, &device);
                        let work = || run_worker(context, rank, workers, model, optimizer, state, &device);
                        // one worker: the caller's cores, as single-worker training has them
                        let outcome = if workers == 1 {
                            std::panic::catch_unwind(AssertUnwindSafe(work))
                        } else {
                            let name = format!("megagraph-temporal-{rank}");
                            run_in_pool(default_threads_per_rank(workers), &name, || {
                                std::panic::catch_unwind(AssertUnwindSafe(work))
                            })
                            .unwrap_or_else(|err| Ok(Err(failure(rank, format!("no thread pool: {err}")))))
                        };
                        let result =
                            outcome.unwrap_or_else(|payload| Err(failure(rank, panic_message(payload.as_ref()))));
                        if result.is_err() {
                            context.store.abort();
                            reset_collective::<B::InnerBackend>();
                        }
                        result
                    });
                (rank, spawned)
            })
            .collect();
        handles
            .into_iter()
            .map(|(rank, handle)| match handle {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|payload| Err(failure(rank, panic_message(payload.as_ref())))),
                Err(err) => {
                    store.abort();
                    reset_collective::<B::InnerBackend>();
                    Err(failure(rank, format!("cannot start its thread: {err}")))
                }
            })
            .collect()
    });
    let mut outcomes = Vec::with_capacity(workers);
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(err) => errors.push(err),
        }
    }
    // a worker released by another's failure reports that; return the cause
    let is_consequence = |err: &TemporalTrainError| match err {
        TemporalTrainError::Worker { message, .. } => message.starts_with("another worker"),
        TemporalTrainError::Parallel(_) => true,
        _ => false,
    };
    if let Some(index) = errors
        .iter()
        .position(|err| !is_consequence(err))
        .or((!errors.is_empty()).then_some(0))
    {
        return Err(errors.swap_remove(index));
    }
    replicas::check_replicas::<B, TemporalModel<B>>(&outcomes.iter().map(|o| &o.model).collect::<Vec<_>>(), epoch)?;
    let counters = EpochCounters {
        sync_bytes: outcomes.iter().map(|o| o.sync_bytes).sum(),
        events_per_worker: plan.events_per_worker(),
        step_seconds: outcomes[0].step_seconds,
        steps: plan.steps.len(),
    };
    let batches: usize = outcomes.iter().map(|o| o.batches).sum();
    let loss = outcomes.iter().map(|o| o.loss_sum).sum::<f64>() / batches.max(1) as f64;
    let state = outcomes.get_mut(plan.last_worker).and_then(|o| o.state.take());
    let first = outcomes.swap_remove(0);
    *optimizer = first.optimizer;
    if observer.should_stop() {
        return Err(TemporalTrainError::Interrupted { epoch: epoch - 1 });
    }
    Ok(EpochOutcome {
        model: first.model,
        loss,
        state,
        counters,
    })
}

fn failure(worker: usize, message: String) -> TemporalTrainError {
    TemporalTrainError::Worker { worker, message }
}

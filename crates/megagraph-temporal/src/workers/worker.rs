//! One worker's epoch: its batches in plan order, the gradient all-reduce, its memory replica
//! and the exchanges through the store.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use burn::optim::Optimizer;
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;
use megagraph_parallel::{ReplicaGradients, fresh_leaves};

use super::plan::EpochPlan;
use super::store::{MemoryStore, NodeRows};
use super::write_back::WriteBack;
use crate::error::Result;
use crate::state::NodeState;
use super::plan::WorkerBatch;
use crate::forward::{forward_chunks, prepare_chunks};
use crate::prepare::PreparedBatch;
use crate::setup::Setup;

/// What every worker of an epoch shares.
pub(crate) struct WorkerContext<'a> {
    /// The run: configuration, data, samplers and the model's configuration.
    pub setup: &'a Setup<'a>,
    /// The epoch's steps.
    pub plan: &'a EpochPlan,
    /// Where memory is reconciled.
    pub store: &'a MemoryStore,
    /// Whether the workers reconcile memory at the plan's sync points.
    pub shares_memory: bool,
    /// Whether cold memory write-backs are deferred off the critical path ([`WriteBack`]).
    pub critical_path: bool,
}

/// What one worker hands back after its epoch.
pub(crate) struct WorkerOutcome<B: AutodiffBackend, O> {
    /// Its model replica.
    pub model: TemporalModel<B>,
    /// Its optimizer (equal on every worker).
    pub optimizer: O,
    /// Its node-state replica.
    pub state: Option<NodeState<B>>,
    /// Sum of its batches' losses.
    pub loss_sum: f64,
    /// Batches it trained on.
    pub batches: usize,
    /// Bytes of node rows it published to and fetched from the store.
    pub sync_bytes: usize,
    /// Wall time of its steps, each from its start to the point the next could start (after
    /// the all-reduce, which waits for the slowest worker, its immediate memory write-back and
    /// the memory exchange; deferred write-backs run in the background and count only where
    /// the worker waits for them).
    pub step_seconds: f64,
}

/// Runs worker `rank` of `world` through the plan of `context`, from `model`, `optimizer` and
/// a fresh `state`. With the critical-path optimization the memory write-back of each batch is
/// split by the next batch's reads ([`WriteBack`]).
///
/// The workers build and run their autodiff graphs (forward pass, loss, backward pass, the
/// memory write computed from the graph) at the same time, each on a replica with fresh
/// autodiff leaves ([`fresh_leaves`]), so no two workers' graphs share a node. Burn 0.21 could
/// free the steps of a graph one thread was still building when another thread's `backward()`
/// ended (tracel-ai/burn#5573), and the workers took turns under a lock; the vendored
/// burn-autodiff fixes that (`vendor/burn-autodiff/PATCHES.md`, item 2).
///
/// # Errors
///
/// Sampling, state or collective failures, and another worker's failure.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_worker<B, O>(
    context: &WorkerContext<'_>,
    rank: usize,
    world: usize,
    mut model: TemporalModel<B>,
    mut optimizer: O,
    state: Option<NodeState<B>>,
    device: &B::Device,
) -> Result<WorkerOutcome<B, O>>
where
    B: AutodiffBackend,
    O: Optimizer<TemporalModel<B>, B>,
{
    let reducer = ReplicaGradients::register::<B, _>(rank, world, &model, device)?;
    let setup = context.setup;
    let stream = &setup.data.stream;
    let learning_rate = setup.config.learning_rate;
    let tensors = setup.tensors::<B>(device);
    let exchanges = context.shares_memory && world > 1;
    let mut outcome_loss = 0.0;
    let (mut batches, mut sync_bytes, mut step_seconds) = (0, 0, 0.0);
    let deferred = context.critical_path && state.is_some();
    let mut state = state.map(|state| WriteBack::new(rank, state, deferred, setup.write_back_delay));
    // node -> the latest event that wrote it since the last exchange
    let mut written: HashMap<usize, usize> = HashMap::new();
    // this worker's next batch, prepared a step ahead when its reads decide what is hot
    let mut ahead: Option<Vec<PreparedBatch>> = None;
    for (index, step) in context.plan.steps.iter().enumerate() {
        let started = Instant::now();
        let batch = step.batches[rank].as_ref();
        let (mut replica, mut grads, mut write) = (None, None, None);
        // the nodes the next batch reads: their write-back stays on the critical path
        let mut hot = HashSet::new();
        if let Some(batch) = batch {
            let chunks = match ahead.take() {
                Some(chunks) => chunks,
                None => prepare(setup, batch)?,
            };
            if deferred {
                let next = context.plan.steps[index + 1..].iter().find_map(|s| s.batches[rank].as_ref());
                if let Some(next) = next {
                    let chunks = prepare(setup, next)?;
                    hot.extend(chunks.iter().flat_map(PreparedBatch::memory_reads));
                    ahead = Some(chunks);
                }
            }
            if let Some(state) = &state {
                state.fence()?;
                debug_assert!(
                    state.pending_among(chunks.iter().flat_map(PreparedBatch::memory_reads)).is_empty(),
                    "worker {rank}, step {index}: a deferred memory write-back is read before it completed"
                );
            }
            let fresh = fresh_leaves(model.clone());
            let mut locked = state.as_ref().map(WriteBack::lock);
            let dropout = batch.phase.dropout_scope(setup.config.seed, batch.index);
            let forward = forward_chunks(setup, &fresh, locked.as_deref_mut(), &chunks, &tensors)?;
            drop((dropout, locked));
            if let Some(loss) = forward.loss {
                outcome_loss += loss.clone().into_scalar().elem::<f64>();
                batches += 1;
                grads = Some(loss.backward());
            }
            write = forward.write;
            replica = Some(fresh);
        }
        let averaged =
            reducer.average::<B, _>(replica.as_ref().unwrap_or(&model), grads.as_ref(), index as u64, device)?;
        drop(grads);
        if let Some(averaged) = averaged {
            model = optimizer.step(learning_rate, model, averaged);
        }
        if let (Some((write, (src, dst))), Some(state)) = (write, state.as_mut()) {
            state.write(write, &src, &dst, &hot)?;
        }
        if let (Some(batch), true) = (batch, exchanges) {
            for &event in &batch.events {
                written.insert(stream.src()[event] as usize, event);
                written.insert(stream.dst()[event] as usize, event);
            }
        }
        if let (true, true, Some(state)) = (step.sync_after, exchanges, state.as_mut()) {
            state.flush()?;
            let mut state = state.lock();
            let mut nodes: Vec<(usize, usize)> = written.drain().collect();
            nodes.sort_unstable();
            let rows = NodeRows::read(&state, &nodes)?;
            sync_bytes += rows.bytes();
            for fetched in context.store.exchange(rank, rows)? {
                sync_bytes += fetched.bytes();
                fetched.write(&mut state, device)?;
            }
        }
        step_seconds += started.elapsed().as_secs_f64();
    }
    let state = state.map(WriteBack::into_state).transpose()?;
    reducer.finish::<B::InnerBackend>();
    Ok(WorkerOutcome {
        model,
        optimizer,
        state,
        loss_sum: outcome_loss,
        batches,
        sync_bytes,
        step_seconds,
    })
}

/// The IMR chunks of `batch`, sampled, with its negatives.
fn prepare(setup: &Setup<'_>, batch: &WorkerBatch) -> Result<Vec<PreparedBatch>> {
    let key = batch.phase.negative_key();
    let negatives = setup.negatives.sample(key, batch.index as u64, batch.events.len(), 1);
    prepare_chunks(setup, &batch.events, &negatives, batch.phase, batch.index)
}

//! One worker's epoch: its batches in plan order, the gradient all-reduce, its memory replica
//! and the exchanges through the store.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use burn::optim::Optimizer;
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;
use megagraph_parallel::{ReplicaGradients, fresh_leaves};

use super::plan::EpochPlan;
use super::store::{MemoryStore, NodeRows};
use crate::error::Result;
use crate::state::NodeState;
use crate::forward::forward_batch;
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
    /// the all-reduce, which waits for the slowest worker, and the memory exchange).
    pub step_seconds: f64,
}

/// Burn 0.21's autodiff graphs live in one process-wide server whose clean-up after a
/// `backward()` can drop the steps of a graph another thread is still building
/// (tracel-ai/burn#5573), so a gradient would silently go missing. The workers therefore build
/// and run their graphs (forward pass, loss, backward pass, the deferred memory write computed
/// from the graph) one at a time under this lock; sampling, the all-reduce, the optimizer
/// step and the memory exchange run in parallel. Each batch also runs on a replica with fresh
/// autodiff leaves ([`fresh_leaves`]), so no two graphs share a node.
static GRAPH: Mutex<()> = Mutex::new(());

fn graph_lock() -> MutexGuard<'static, ()> {
    GRAPH.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs worker `rank` of `world` through the plan of `context`, from `model`, `optimizer` and
/// a fresh `state`.
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
    mut state: Option<NodeState<B>>,
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
    let mut outcome_loss = 0.0;
    let (mut batches, mut sync_bytes, mut step_seconds) = (0, 0, 0.0);
    // node -> the latest event that wrote it since the last exchange
    let mut written: HashMap<usize, usize> = HashMap::new();
    for (index, step) in context.plan.steps.iter().enumerate() {
        let started = Instant::now();
        let batch = step.batches[rank].as_ref();
        let (mut replica, mut grads, mut write) = (None, None, None);
        if let Some(batch) = batch {
            let negatives =
                setup
                    .negatives
                    .sample(batch.phase.negative_key(), batch.index as u64, batch.events.len(), 1);
            let _graph = graph_lock();
            let fresh = fresh_leaves(model.clone());
            let forward = forward_batch(
                setup,
                &fresh,
                state.as_mut(),
                &batch.events,
                &negatives,
                batch.phase,
                batch.index,
                &tensors,
            )?;
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
            let _graph = graph_lock();
            write.apply(&src, &dst, &mut state.memory, &mut state.mailbox)?;
        }
        if let (Some(batch), true) = (batch, context.shares_memory && world > 1) {
            for &event in &batch.events {
                written.insert(stream.src()[event] as usize, event);
                written.insert(stream.dst()[event] as usize, event);
            }
        }
        if let (true, true, Some(state)) = (step.sync_after, context.shares_memory && world > 1, state.as_mut()) {
            let mut nodes: Vec<(usize, usize)> = written.drain().collect();
            nodes.sort_unstable();
            let rows = NodeRows::read(state, &nodes)?;
            sync_bytes += rows.bytes();
            for fetched in context.store.exchange(rank, rows)? {
                sync_bytes += fetched.bytes();
                fetched.write(state, device)?;
            }
        }
        step_seconds += started.elapsed().as_secs_f64();
    }
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

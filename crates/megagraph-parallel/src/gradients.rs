//! Gradients as one flat buffer per stage, and their all-reduce over each stage's
//! `dp x cp` group with burn-collective.
//!
//! burn-collective 0.21 runs one collective group per backend type and process: every
//! registered peer joins every all-reduce. To reduce over each stage's group separately in one
//! call, every rank contributes a buffer laid out over ALL stages, holding its own stage's
//! gradients at that stage's offset and zeros elsewhere; after the `Sum` all-reduce each rank
//! reads back its stage's segment, which is then the sum over the ranks of its stage only
//! (adding zeros is exact). The buffer is the size of the whole model's parameters (a few MB for
//! the paper's model), plus one slot for the step's loss; one collective call per step.
//!
//! With several nodes ([`NodeConfig`]) the same call runs in burn-collective's global mode:
//! summed inside the process, then over the nodes, so every stage's segment is summed over all
//! ranks of the stage on every node and the loss slot over everything. Global mode has no
//! timeouts: every call into it runs on a helper thread the rank waits on with the mesh's
//! timeout and abort flag ([`guarded`]).
//!
//! A stage's segment holds every float parameter's gradient flattened in visiting order, then
//! one presence flag per parameter (`1.0` if the rank's backward produced a gradient for it),
//! so a parameter no rank touched is left out of the optimizer step exactly as
//! [`GradientsParams::from_grads`] leaves it out on a single device.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use burn::collective::{
    CollectiveConfig, CollectiveError, PeerId, ReduceOperation, all_reduce, finish_collective,
    register, reset_collective,
};
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor, TensorPrimitive};

use crate::mesh::{Control, POLL};
use crate::{NodeConfig, ParallelError};

/// Sizes of a module's flat gradient segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentLayout {
    /// Total number of float parameter elements.
    pub elements: usize,
    /// Number of float parameter tensors (one presence flag each).
    pub params: usize,
}

impl SegmentLayout {
    /// Length of the segment: elements plus presence flags.
    pub fn len(&self) -> usize {
        self.elements + self.params
    }

    /// The layout of `module`'s float parameters.
    pub fn of<B: Backend, M: burn::module::Module<B>>(module: &M) -> Self {
        struct Count(SegmentLayout);
        impl<B: Backend> ModuleVisitor<B> for Count {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                self.0.elements += param.shape().num_elements();
                self.0.params += 1;
            }
        }
        let mut count = Count(SegmentLayout::default());
        module.visit(&mut count);
        count.0
    }
}

/// Flattens the gradients of `module`'s float parameters found in `grads` into one segment
/// (see the module docs), on `device`.
pub(crate) fn flatten<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &B::Gradients,
    device: &B::Device,
) -> Tensor<B::InnerBackend, 1> {
    struct Collect<'a, B: AutodiffBackend> {
        grads: &'a B::Gradients,
        device: B::Device,
        parts: Vec<Tensor<B::InnerBackend, 1>>,
        present: Vec<f32>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let n = param.shape().num_elements();
            match param.val().grad(self.grads) {
                Some(grad) => {
                    self.parts.push(grad.reshape([n]));
                    self.present.push(1.0);
                }
                None => {
                    self.parts.push(Tensor::zeros([n], &self.device));
                    self.present.push(0.0);
                }
            }
        }
    }
    let mut collect = Collect::<B> {
        grads,
        device: device.clone(),
        parts: Vec::new(),
        present: Vec::new(),
    };
    module.visit(&mut collect);
    let mut parts = collect.parts;
    let flags = collect.present.len();
    parts.push(Tensor::from_data(
        burn::tensor::TensorData::new(collect.present, [flags]),
        device,
    ));
    Tensor::cat(parts, 0)
}

/// The [`GradientsParams`] of `module` from a flat segment (see [`flatten`]).
///
/// # Errors
///
/// A message when the segment cannot be read back.
pub(crate) fn unflatten<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    segment: Tensor<B::InnerBackend, 1>,
) -> Result<GradientsParams, String> {
    let layout = SegmentLayout::of::<B, M>(module);
    let flags = segment
        .clone()
        .slice(layout.elements..layout.len())
        .into_data()
        .iter::<f32>()
        .collect::<Vec<f32>>();
    if flags.len() != layout.params {
        return Err(format!(
            "gradient segment has {} presence flags, the module {} parameters",
            flags.len(),
            layout.params
        ));
    }
    struct Split<B: AutodiffBackend> {
        segment: Tensor<B::InnerBackend, 1>,
        flags: Vec<f32>,
        offset: usize,
        index: usize,
        grads: GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Split<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let shape = param.shape();
            let n = shape.num_elements();
            if self.flags.get(self.index).copied().unwrap_or(0.0) > 0.0 {
                let grad: Tensor<B::InnerBackend, D> = self
                    .segment
                    .clone()
                    .slice(self.offset..self.offset + n)
                    .reshape(shape);
                self.grads.register::<B::InnerBackend, D>(param.id, grad);
            }
            self.offset += n;
            self.index += 1;
        }
    }
    let mut split = Split::<B> {
        segment,
        flags,
        offset: 0,
        index: 0,
        grads: GradientsParams::new(),
    };
    module.visit(&mut split);
    Ok(split.grads)
}

/// One rank's membership in the mesh-wide gradient all-reduce.
pub(crate) struct GradientReducer {
    rank: usize,
    peer: PeerId,
    /// Offset of each stage's segment in the mesh-wide buffer, and the gradients' length last
    /// (the step's loss follows in one more slot).
    offsets: Vec<usize>,
    /// Multi-node mode: every call into the collective is guarded (see [`guarded`]).
    global: Option<Global>,
}

/// What a rank needs to wait on burn-collective's global mode without hanging.
struct Global {
    node: usize,
    control: Arc<Control>,
}

/// How long a rank waits for the collective to acknowledge that it leaves, at the end of a
/// multi-node run.
const FINISH_PATIENCE: Duration = Duration::from_secs(10);

impl GradientReducer {
    /// Registers `rank` with burn-collective for a mesh of `world` ranks whose stages have the
    /// given segment lengths: in this process only, or, with a multi-node `nodes`, also with
    /// the orchestrator (which answers once every node's ranks registered). Blocks until every
    /// rank registered; in multi-node mode gives up when `control` aborts or after its timeout.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when registration fails, [`ParallelError::PeerTimeout`]
    /// when the other nodes do not register in time, [`ParallelError::Aborted`],
    /// [`ParallelError::NodeLost`], or [`ParallelError::Nodes`] for a bad address.
    pub fn register<B: Backend>(
        rank: usize,
        world: usize,
        stage_lengths: &[usize],
        device: &B::Device,
        nodes: Option<&NodeConfig>,
        control: &Arc<Control>,
    ) -> Result<Self, ParallelError> {
        let mut offsets = Vec::with_capacity(stage_lengths.len() + 1);
        let mut total = 0;
        for len in stage_lengths {
            offsets.push(total);
            total += len;
        }
        offsets.push(total);
        let collective_error = |err: CollectiveError| ParallelError::Collective {
            rank,
            operation: "register",
            message: format!("{err:?}"),
        };
        let Some(nodes) = nodes.filter(|nodes| nodes.is_multi_node()) else {
            let peer = PeerId::from(rank);
            register::<B>(
                peer,
                device.clone(),
                CollectiveConfig::default().with_num_devices(world),
            )
            .map_err(collective_error)?;
            return Ok(Self {
                rank,
                peer,
                offsets,
                global: None,
            });
        };
        let peer = nodes.peer_id(rank, world);
        let config = nodes.collective_config(world)?;
        let global = Global {
            node: nodes.node_rank,
            control: control.clone(),
        };
        let device = device.clone();
        let what = format!(
            "the {} nodes to register with the orchestrator at {}",
            nodes.num_nodes, nodes.orchestrator
        );
        guarded(
            &global,
            rank,
            "register",
            &what,
            control.timeout,
            move || register::<B>(peer, device, config),
        )?
        .map_err(|err| global.error(rank, "register", err))?;
        Ok(Self {
            rank,
            peer,
            offsets,
            global: Some(global),
        })
    }

    /// Sums `segment` (stage `stage`'s flat gradients on this rank) over every rank of the
    /// stage, on every node, and `loss` over every rank of every node; returns this stage's
    /// summed segment and the summed loss.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when the all-reduce fails (also after the mesh was
    /// stopped: the coordinator resets a single-process collective to release waiting ranks);
    /// in multi-node mode [`ParallelError::NodeLost`], [`ParallelError::PeerTimeout`] or
    /// [`ParallelError::Aborted`].
    pub fn all_reduce<B: Backend>(
        &self,
        stage: usize,
        segment: Tensor<B, 1>,
        loss: f64,
        step: u64,
    ) -> Result<(Tensor<B, 1>, f64), ParallelError> {
        let device = segment.device();
        let start = self.offsets[stage];
        let end = self.offsets[stage + 1];
        let total = self.offsets[self.offsets.len() - 1];
        let mut parts = Vec::with_capacity(4);
        if start > 0 {
            parts.push(Tensor::zeros([start], &device));
        }
        parts.push(segment);
        if end < total {
            parts.push(Tensor::zeros([total - end], &device));
        }
        parts.push(Tensor::from_floats([loss as f32], &device));
        let buffer = Tensor::cat(parts, 0).into_primitive().tensor();
        let peer = self.peer;
        let reduced = match &self.global {
            None => all_reduce::<B>(peer, buffer, ReduceOperation::Sum).map_err(|err| {
                ParallelError::Collective {
                    rank: self.rank,
                    operation: "all_reduce",
                    message: format!("{err:?}"),
                }
            })?,
            Some(global) => {
                let what = format!("the gradient all-reduce of step {step} over all nodes");
                guarded(
                    global,
                    self.rank,
                    "all_reduce",
                    &what,
                    global.control.timeout,
                    move || all_reduce::<B>(peer, buffer, ReduceOperation::Sum),
                )?
                .map_err(|err| global.error(self.rank, "all_reduce", err))?
            }
        };
        let reduced: Tensor<B, 1> = Tensor::from_primitive(TensorPrimitive::Float(reduced));
        let reduced = reduced.to_device(&device);
        let loss = reduced
            .clone()
            .slice(total..total + 1)
            .into_scalar()
            .elem::<f64>();
        Ok((reduced.slice(start..end), loss))
    }

    /// Leaves the collective (errors are ignored: the mesh is shutting down). In multi-node
    /// mode the last rank of the process also leaves the orchestrator; a rank waits at most
    /// [`FINISH_PATIENCE`] for that.
    pub fn finish<B: Backend>(self) {
        let peer = self.peer;
        let outcome = match &self.global {
            None => Ok(finish_collective::<B>(peer)),
            Some(global) => guarded(
                global,
                self.rank,
                "finish",
                "the collective to let this rank leave",
                FINISH_PATIENCE,
                move || finish_collective::<B>(peer),
            ),
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(err)) => log::debug!("rank {}: finish_collective: {err:?}", self.rank),
            Err(err) => log::debug!("rank {}: finish_collective: {err}", self.rank),
        }
    }
}

impl Global {
    /// The error of a failed call into the global collective: a lost node when the process's
    /// collective server went away (burn-collective's server panics when a peer node's
    /// connection breaks), else the collective's error.
    fn error(&self, rank: usize, operation: &'static str, err: CollectiveError) -> ParallelError {
        match err {
            CollectiveError::LocalServerMissing => ParallelError::NodeLost {
                node: self.node,
                rank,
                operation,
                message: "the collective stopped: another node ended or its connection broke"
                    .into(),
            },
            other => ParallelError::Collective {
                rank,
                operation,
                message: format!("{other:?}"),
            },
        }
    }
}

/// Runs `call` (a blocking call into burn-collective) on a helper thread and waits for it
/// until `global.control` aborts or `patience` passes: burn-collective's global mode waits
/// without a timeout for peer nodes that may never answer. A call given up on stays blocked on
/// its helper thread; the process's collective is then unusable.
fn guarded<T: Send + 'static>(
    global: &Global,
    rank: usize,
    operation: &'static str,
    what: &str,
    patience: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ParallelError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("megagraph-collective-{rank}"))
        .spawn(move || {
            let _ = tx.send(call());
        })
        .map_err(|err| ParallelError::Collective {
            rank,
            operation,
            message: format!("cannot start a thread: {err}"),
        })?;
    let started = Instant::now();
    loop {
        match rx.recv_timeout(POLL) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => {
                if global.control.aborted() {
                    return Err(ParallelError::Aborted { rank });
                }
                let waited = started.elapsed();
                if waited > patience {
                    return Err(ParallelError::PeerTimeout {
                        rank,
                        waiting_for: format!("{what} (a node may have stopped)"),
                        seconds: waited.as_secs_f64(),
                    });
                }
            }
            // the helper panicked: burn-collective's client panics when its server is gone
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ParallelError::NodeLost {
                    node: global.node,
                    rank,
                    operation,
                    message: "the collective of this process is gone (an earlier failure)".into(),
                });
            }
        }
    }
}

/// Forgets every registered peer and pending operation of the collective of backend `B`, which
/// releases ranks blocked in an all-reduce whose peer failed.
pub fn reset<B: Backend>() {
    reset_collective::<B>();
}

/// burn-collective keeps one group per backend type and process, so at most one mesh that
/// all-reduces may run at a time: [`CollectiveLease::acquire`] waits for the previous one to be
/// dropped.
pub struct CollectiveLease;

static BUSY: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

impl CollectiveLease {
    /// Waits until no other mesh of this process uses the collective, then takes it; `None`
    /// when that takes longer than `patience`.
    pub fn acquire(patience: Duration) -> Option<Self> {
        let deadline = Instant::now() + patience;
        let mut busy = BUSY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while *busy {
            let left = deadline.checked_duration_since(Instant::now())?;
            busy = FREED
                .wait_timeout(busy, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        *busy = true;
        Some(CollectiveLease)
    }
}

impl Drop for CollectiveLease {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *busy = false;
        FREED.notify_all();
    }
}

/// The gradient all-reduce of a group of identical model replicas, one per thread of this
/// process (data parallelism of any [`AutodiffModule`]): the same flat buffer, presence flags
/// and burn-collective `Sum` as the Graph Transformer's mesh, over one stage.
///
/// Every replica calls [`average`](Self::average) once per step, with or without gradients
/// of its own; each gets back the mean over the replicas that had gradients, so the same
/// optimizer step keeps the replicas equal. Hold a [`CollectiveLease`] while a group runs.
pub struct ReplicaGradients {
    reducer: GradientReducer,
    layout: SegmentLayout,
}

impl ReplicaGradients {
    /// Registers replica `rank` of `world` replicas of `module` (blocks until all registered).
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when registration fails.
    pub fn register<B: AutodiffBackend, M: AutodiffModule<B>>(
        rank: usize,
        world: usize,
        module: &M,
        device: &B::Device,
    ) -> Result<Self, ParallelError> {
        let layout = SegmentLayout::of::<B, M>(module);
        let control = Arc::new(Control::new(Duration::from_secs(600)));
        let reducer = GradientReducer::register::<B::InnerBackend>(rank, world, &[layout.len()], device, None, &control)?;
        Ok(Self { reducer, layout })
    }

    /// The mean over the replicas that had gradients (`grads` is `None` on a replica without
    /// work this step) of `module`'s gradients, or `None` when no replica had any. A
    /// parameter no contributing replica has a gradient for is left out, as on one device.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when the all-reduce fails (a peer failed and
    /// [`reset`] released the group), or the reduced buffer cannot be read back.
    pub fn average<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: Option<&B::Gradients>,
        step: u64,
        device: &B::Device,
    ) -> Result<Option<GradientsParams>, ParallelError> {
        let (segment, weight) = match grads {
            Some(grads) => (flatten::<B, M>(module, grads, device), 1.0),
            None => (Tensor::zeros([self.layout.len()], device), 0.0),
        };
        let (sum, contributors) = self.reducer.all_reduce::<B::InnerBackend>(0, segment, weight, step)?;
        if contributors < 0.5 {
            return Ok(None);
        }
        let mean = if contributors > 1.5 { sum.div_scalar(contributors.round()) } else { sum };
        unflatten::<B, M>(module, mean).map(Some).map_err(|message| ParallelError::Collective {
            rank: self.reducer.rank,
            operation: "all_reduce",
            message,
        })
    }

    /// Leaves the collective.
    pub fn finish<B: Backend>(self) {
        self.reducer.finish::<B>();
    }
}

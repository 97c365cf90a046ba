//! One rank's thread: its stage's parameters and optimizer, the 1F1B schedule over its
//! replica's micro-batches with ring attention inside every layer, and the gradient all-reduce.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor};

use crate::context::{ContextParallelBackend, RingCall};
use crate::data::{BatchSource, BlockRequest};
use crate::gradients::{GradientReducer, flatten, unflatten};
use crate::mesh::{Activation, ActivationGrad, Control, Links, MeshShape, RankCoord, receive};
use crate::meter::{MemoryMeter, ThreadAllocatorMeter};
use crate::stage::{BlockContext, StageModule, fresh_leaves, trainable};
use crate::threads::panic_message;
use crate::{InjectedFault, NodeConfig, OptimizerRecord, ParallelError};
use megagraph_layout::{PipelineAction, one_forward_one_backward};
use megagraph_models::masked_cross_entropy;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// What the coordinator asks a worker to do.
pub(crate) enum Command<B: AutodiffBackend> {
    /// Run one optimizer step.
    Step(Arc<StepPlan>),
    /// Send back a copy of the stage's parameters.
    Snapshot,
    /// Send back a copy of the stage's optimizer state.
    ExportOptimizer,
    /// Replace the stage's optimizer state by the entries of this record that belong to the
    /// stage's parameters (a whole model's record may be given to every rank).
    ImportOptimizer(Arc<OptimizerRecord<B>>),
    /// Leave the collective and end the thread.
    Shutdown,
}

/// One optimizer step, as every rank sees it.
#[derive(Debug)]
pub(crate) struct StepPlan {
    /// Step counter (tags every message).
    pub step: u64,
    /// Sequences of each replica's micro-batches: `replicas[dp_rank][micro]`.
    pub replicas: Vec<Vec<Vec<usize>>>,
    /// Learning rate.
    pub lr: f64,
    /// Training nodes of the whole step (every process's sequences): the loss normalizer.
    pub train_nodes: usize,
}

/// What one rank measured during a step.
#[derive(Clone, Debug, PartialEq)]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Its coordinates.
    pub coord: RankCoord,
    /// Sum of this rank's micro-batch losses (non-zero on the last stage only).
    pub loss: f64,
    /// The most micro-batches it held between their forward and backward passes.
    pub max_in_flight: usize,
    /// Wall time of its step, in seconds.
    pub seconds: f64,
    /// `seconds` minus the time spent waiting for peers (pipeline messages, ring blocks, the
    /// gradient all-reduce): the rank's own work, what a balanced plan equalizes.
    pub busy_seconds: f64,
    /// Peak bytes allocated by its thread during the step, when a
    /// [`CountingAllocator`](crate::CountingAllocator) is the global allocator.
    pub peak_bytes: Option<usize>,
    /// Bytes of the largest distance index (its block's rows, dense or sparse) it held for a
    /// micro-batch of the step.
    pub index_bytes: usize,
    /// What a dense `u8` index of the same rows would take (`batch x block rows x padded
    /// sequence`).
    pub dense_index_bytes: usize,
}

/// A worker's answer.
pub(crate) enum ReplyBody<B: AutodiffBackend> {
    /// Set up and registered.
    Ready,
    /// A step finished; with the loss summed over every rank of every node when the step's
    /// all-reduce carried it (multi-node runs read it from here).
    Step(RankReport, Option<f64>),
    /// The stage's parameters.
    Snapshot(Box<StageModule<Inner<B>>>),
    /// The stage's optimizer state.
    Optimizer(OptimizerRecord<B>),
    /// The optimizer state was replaced.
    OptimizerLoaded,
}

/// A worker's answer with its rank.
pub(crate) struct Reply<B: AutodiffBackend> {
    pub rank: usize,
    pub body: Result<ReplyBody<B>, ParallelError>,
}

/// Everything a worker thread starts with.
pub(crate) struct WorkerSetup<B: ContextParallelBackend> {
    pub rank: usize,
    pub shape: MeshShape,
    pub device: B::Device,
    pub module: StageModule<Inner<B>>,
    pub optimizer: AdamWConfig,
    pub links: Links<Inner<B>>,
    pub control: Arc<Control>,
    pub source: Arc<dyn BatchSource<B>>,
    /// Flat gradient length of every stage (for the mesh-wide all-reduce), `None` when the
    /// stage groups have a single rank and nothing is reduced.
    pub reduce: Option<Vec<usize>>,
    /// This node's place in a multi-node run (the all-reduce then spans the nodes).
    pub nodes: Option<NodeConfig>,
    pub fault: Option<InjectedFault>,
    /// How the rank measures its peak memory (`None`: the counting allocator).
    pub meter: Option<Arc<dyn MemoryMeter>>,
    /// Threads of the rank's rayon pool.
    pub threads: usize,
    pub commands: Receiver<Command<B>>,
    pub replies: Sender<Reply<B>>,
}

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

/// The ids of `module`'s float parameters.
fn param_ids<B: burn::tensor::backend::Backend, M: Module<B>>(module: &M) -> HashSet<ParamId> {
    struct Ids(HashSet<ParamId>);
    impl<B: burn::tensor::backend::Backend> ModuleVisitor<B> for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.insert(param.id);
        }
    }
    let mut ids = Ids(HashSet::new());
    module.visit(&mut ids);
    ids.0
}

/// A micro-batch between its forward and backward passes.
struct InFlight<B: ContextParallelBackend> {
    /// The stage's parameters as this micro-batch's own leaves (see
    /// [`fresh_leaves`](crate::stage::fresh_leaves)); its gradients are read from them.
    module: StageModule<B>,
    /// The stage's output (stages before the last).
    output: Option<Tensor<B, 3>>,
    /// The micro-batch's loss (last stage).
    loss: Option<Tensor<B, 1>>,
    /// The spatial table used: stage 0's parameter, or the received leaf.
    table: Tensor<B, 2>,
    /// The received activation leaf (stages after the first).
    input: Option<Tensor<B, 3>>,
}

struct Worker<B: ContextParallelBackend> {
    rank: usize,
    coord: RankCoord,
    shape: MeshShape,
    device: B::Device,
    inner_device: B::Device,
    module: Option<StageModule<B>>,
    optimizer: AdamWConfig,
    links: Links<Inner<B>>,
    control: Arc<Control>,
    source: Arc<dyn BatchSource<B>>,
    reducer: Option<GradientReducer>,
    fault: Option<InjectedFault>,
    meter: Arc<dyn MemoryMeter>,
    commands: Receiver<Command<B>>,
    replies: Sender<Reply<B>>,
    /// Time spent waiting for pipeline messages and the all-reduce during the current step.
    waited: Cell<Duration>,
    /// The largest distance index of the current step's micro-batches: (bytes held, dense bytes).
    index_bytes: Cell<(usize, usize)>,
}

impl<B: ContextParallelBackend> Worker<B> {
    fn start(setup: WorkerSetup<B>) -> Result<Self, ParallelError> {
        let coord = setup.shape.coord(setup.rank);
        let inner_device = setup.device.clone();
        // register first: nothing before it can fail, so no rank is left waiting in register
        let reducer = match &setup.reduce {
            Some(lengths) => Some(GradientReducer::register::<Inner<B>>(
                setup.rank,
                setup.shape.world(),
                lengths,
                &inner_device,
                setup.nodes.as_ref(),
                &setup.control,
            )?),
            None => None,
        };
        let module = trainable(StageModule::<B>::from_inner(
            setup.module.to_device(&inner_device),
        ));
        let worker = Worker {
            rank: setup.rank,
            coord,
            shape: setup.shape,
            device: setup.device,
            inner_device,
            module: Some(module),
            optimizer: setup.optimizer,
            links: setup.links,
            control: setup.control,
            source: setup.source,
            reducer,
            fault: setup.fault,
            meter: setup
                .meter
                .unwrap_or_else(|| Arc::new(ThreadAllocatorMeter)),
            commands: setup.commands,
            replies: setup.replies,
            waited: Cell::new(Duration::ZERO),
            index_bytes: Cell::new((0, 0)),
        };
        worker.reply(Ok(ReplyBody::Ready));
        Ok(worker)
    }

    fn reply(&self, body: Result<ReplyBody<B>, ParallelError>) {
        if self
            .replies
            .send(Reply {
                rank: self.rank,
                body,
            })
            .is_err()
        {
            log::debug!("rank {}: coordinator gone", self.rank);
        }
    }

    fn serve(mut self) -> Result<(), ParallelError> {
        let mut optimizer = self.optimizer.init::<B, StageModule<B>>();
        while let Ok(command) = self.commands.recv() {
            match command {
                Command::Step(plan) => {
                    let (report, reduced_loss) = self.step(&plan, &mut optimizer)?;
                    self.reply(Ok(ReplyBody::Step(report, reduced_loss)));
                }
                Command::Snapshot => {
                    let module = self.module()?.valid();
                    self.reply(Ok(ReplyBody::Snapshot(Box::new(module))));
                }
                Command::ExportOptimizer => {
                    self.reply(Ok(ReplyBody::Optimizer(optimizer.to_record())));
                }
                Command::ImportOptimizer(record) => {
                    let ids = param_ids(self.module()?);
                    let own = record
                        .iter()
                        .filter(|(id, _)| ids.contains(id))
                        .map(|(id, state)| (*id, state.clone()))
                        .collect();
                    optimizer = optimizer.load_record(own);
                    self.reply(Ok(ReplyBody::OptimizerLoaded));
                }
                Command::Shutdown => break,
            }
        }
        if let Some(reducer) = self.reducer.take() {
            reducer.finish::<Inner<B>>();
        }
        Ok(())
    }

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

    fn module(&self) -> Result<&StageModule<B>, ParallelError> {
        self.module
            .as_ref()
            .ok_or_else(|| self.internal("stage module missing"))
    }

    fn internal(&self, message: &str) -> ParallelError {
        ParallelError::WorkerPanicked {
            rank: self.rank,
            message: format!("internal error: {message}"),
        }
    }

    fn is_last(&self) -> bool {
        self.coord.stage + 1 == self.shape.pp
    }

    /// The step's peak memory from the rank's meter (`None` when it cannot measure here),
    /// after the backend ran everything queued.
    fn peak_bytes(&self) -> Option<usize> {
        if !self.meter.available() {
            return None;
        }
        B::sync(&self.device).ok();
        Some(self.meter.peak() as usize)
    }

    fn step<O: Optimizer<StageModule<B>, B>>(
        &mut self,
        plan: &StepPlan,
        optimizer: &mut O,
    ) -> Result<(RankReport, Option<f64>), ParallelError> {
        let started = Instant::now();
        let ring_waited = self.links.ring.waited_seconds();
        self.waited.set(Duration::ZERO);
        self.index_bytes.set((0, 0));
        self.meter.reset_peak();
        let micro_batches = plan
            .replicas
            .get(self.coord.dp_rank)
            .ok_or_else(|| self.internal("no micro-batches for this replica"))?;
        let schedule =
            one_forward_one_backward(self.coord.stage, self.shape.pp, micro_batches.len());
        let mut in_flight: HashMap<usize, InFlight<B>> = HashMap::new();
        let mut max_in_flight = 0;
        let mut loss = 0.0;
        let mut accumulated: Option<Tensor<Inner<B>, 1>> = None;
        for action in schedule {
            match action {
                PipelineAction::Forward(micro) => {
                    if let Some(fault) = self.fault
                        && fault.rank == self.rank
                        && fault.step == plan.step
                    {
                        panic!(
                            "injected fault on rank {} at step {} (test hook)",
                            self.rank, plan.step
                        );
                    }
                    let sequences = &micro_batches[micro];
                    let (saved, micro_loss) = self.forward(plan, micro, sequences)?;
                    // a sampling meter (GPU) reads here, with the micro-batch's activations live
                    self.meter.peak();
                    loss += micro_loss;
                    in_flight.insert(micro, saved);
                    max_in_flight = max_in_flight.max(in_flight.len());
                }
                PipelineAction::Backward(micro) => {
                    let saved = in_flight
                        .remove(&micro)
                        .ok_or_else(|| self.internal("backward before forward"))?;
                    let module = saved.module.clone();
                    let grads = self.backward(plan, micro, saved)?;
                    self.meter.peak();
                    if let Some(failure) = self.links.ring.take_failure() {
                        return Err(failure);
                    }
                    let flat = flatten::<B, _>(&module, &grads, &self.device);
                    accumulated = Some(match accumulated {
                        Some(sum) => sum + flat,
                        None => flat,
                    });
                }
            }
        }
        let mut segment = accumulated.ok_or_else(|| self.internal("step without micro-batches"))?;
        let mut reduced_loss = None;
        if let Some(reducer) = &self.reducer {
            let reduce_started = Instant::now();
            let (summed, summed_loss) =
                reducer.all_reduce(self.coord.stage, segment, loss, plan.step)?;
            segment = summed;
            reduced_loss = Some(summed_loss);
            self.waited
                .set(self.waited.get() + reduce_started.elapsed());
        }
        let module = self
            .module
            .take()
            .ok_or_else(|| self.internal("stage module missing"))?;
        let grads = unflatten::<B, _>(&module, segment).map_err(|message| self.internal(&message));
        let grads = match grads {
            Ok(grads) => grads,
            Err(error) => {
                self.module = Some(module);
                return Err(error);
            }
        };
        self.module = Some(optimizer.step(plan.lr, module, grads));
        let seconds = started.elapsed().as_secs_f64();
        let waited =
            self.waited.get().as_secs_f64() + self.links.ring.waited_seconds() - ring_waited;
        let report = RankReport {
            rank: self.rank,
            coord: self.coord,
            loss,
            max_in_flight,
            seconds,
            busy_seconds: (seconds - waited).max(0.0),
            peak_bytes: self.peak_bytes(),
            index_bytes: self.index_bytes.get().0,
            dense_index_bytes: self.index_bytes.get().1,
        };
        Ok((report, reduced_loss))
    }

    /// Forward pass of one micro-batch; returns what its backward needs and its loss (last
    /// stage; 0 elsewhere).
    fn forward(
        &self,
        plan: &StepPlan,
        micro: usize,
        sequences: &[usize],
    ) -> Result<(InFlight<B>, f64), ParallelError> {
        let source_error = |message: String| ParallelError::Source {
            rank: self.rank,
            message,
        };
        let request = BlockRequest {
            cp: self.shape.cp,
            position: self.coord.cp_rank,
            with_input: self.coord.stage == 0,
        };
        let block = self
            .source
            .block(sequences, request, &self.device)
            .map_err(source_error)?;
        let [batch, rows, columns] = block.index_rows.dims();
        let (held, dense) = self.index_bytes.get();
        self.index_bytes.set((
            held.max(block.index_rows.bytes()),
            dense.max(batch * rows * columns),
        ));
        let module = fresh_leaves(self.module()?.clone());
        let (x, table, input) = if self.coord.stage == 0 {
            let node_input = block
                .input
                .ok_or_else(|| self.internal("the source gave stage 0 no node input"))?;
            let x = module
                .embed(node_input, block.in_degree, block.out_degree)
                .ok_or_else(|| self.internal("stage 0 without embedding"))?;
            let table = module
                .spatial
                .as_ref()
                .ok_or_else(|| self.internal("stage 0 without spatial table"))?
                .table
                .val();
            (x, table, None)
        } else {
            let link = self
                .links
                .activation_in
                .as_ref()
                .ok_or_else(|| self.internal("no activation link"))?;
            let what = || {
                format!(
                    "the activation of step {} micro-batch {micro} from stage {}",
                    plan.step,
                    self.coord.stage - 1
                )
            };
            let message = self.timed_receive(link, what)?;
            if message.step != plan.step || message.micro != micro {
                return Err(ParallelError::OutOfOrder {
                    rank: self.rank,
                    expected: what(),
                    got: format!("step {} micro-batch {}", message.step, message.micro),
                });
            }
            let x =
                Tensor::<B, 3>::from_inner(message.x.to_device(&self.inner_device)).require_grad();
            let table = Tensor::<B, 2>::from_inner(message.table.to_device(&self.inner_device))
                .require_grad();
            (x.clone(), table, Some(x))
        };
        let context = BlockContext {
            index_rows: block.index_rows,
            padding: block.padding,
            table: table.clone(),
            ring: &self.links.ring,
            call: RingCall {
                step: plan.step,
                micro,
                layer: 0,
            },
        };
        let output = module.forward_layers(x, &context)?;
        if self.is_last() {
            let logits = module
                .head(output)
                .ok_or_else(|| self.internal("last stage without head"))?;
            let loss = masked_cross_entropy(logits, block.labels, block.weight, plan.train_nodes);
            let value = loss.clone().into_scalar().elem::<f64>();
            Ok((
                InFlight {
                    module,
                    output: None,
                    loss: Some(loss),
                    table,
                    input,
                },
                value,
            ))
        } else {
            let link = self
                .links
                .activation_out
                .as_ref()
                .ok_or_else(|| self.internal("no activation link"))?;
            link.send(Activation {
                step: plan.step,
                micro,
                x: output.clone().inner(),
                table: table.clone().inner(),
            })
            .map_err(|_| ParallelError::PeerGone {
                rank: self.rank,
                waiting_for: format!("stage {} (activation)", self.coord.stage + 1),
            })?;
            Ok((
                InFlight {
                    module,
                    output: Some(output),
                    loss: None,
                    table,
                    input,
                },
                0.0,
            ))
        }
    }

    /// Backward pass of one micro-batch; sends the input's and the table's gradients to the
    /// previous stage and returns the gradients.
    fn backward(
        &self,
        plan: &StepPlan,
        micro: usize,
        saved: InFlight<B>,
    ) -> Result<B::Gradients, ParallelError> {
        // see `RingEndpoint::barrier`: no ring peer may still be waiting for someone else
        // once this rank's backward holds its graph lock
        let barrier = || {
            if self.shape.cp > 1 {
                self.links.ring.barrier(RingCall {
                    step: plan.step,
                    micro,
                    layer: usize::MAX,
                })
            } else {
                Ok(())
            }
        };
        let grads = match (saved.loss, saved.output) {
            (Some(loss), _) => {
                barrier()?;
                loss.backward()
            }
            (None, Some(output)) => {
                let link = self
                    .links
                    .grad_in
                    .as_ref()
                    .ok_or_else(|| self.internal("no gradient link"))?;
                let what = || {
                    format!(
                        "the gradient of step {} micro-batch {micro} from stage {}",
                        plan.step,
                        self.coord.stage + 1
                    )
                };
                let message = self.timed_receive(link, what)?;
                if message.step != plan.step || message.micro != micro {
                    return Err(ParallelError::OutOfOrder {
                        rank: self.rank,
                        expected: what(),
                        got: format!("step {} micro-batch {}", message.step, message.micro),
                    });
                }
                let grad_x = Tensor::<B, 3>::from_inner(message.x.to_device(&self.inner_device));
                let grad_table =
                    Tensor::<B, 2>::from_inner(message.table.to_device(&self.inner_device));
                // d(surrogate)/d(output) = grad_x and d/d(table) = grad_table exactly
                let surrogate = (output * grad_x).sum() + (saved.table.clone() * grad_table).sum();
                barrier()?;
                surrogate.backward()
            }
            (None, None) => return Err(self.internal("micro-batch without output")),
        };
        if let (Some(input), Some(link)) = (&saved.input, &self.links.grad_out) {
            let grad_x = input
                .grad(&grads)
                .unwrap_or_else(|| input.clone().inner().zeros_like());
            let grad_table = saved
                .table
                .grad(&grads)
                .unwrap_or_else(|| saved.table.clone().inner().zeros_like());
            link.send(ActivationGrad {
                step: plan.step,
                micro,
                x: grad_x,
                table: grad_table,
            })
            .map_err(|_| ParallelError::PeerGone {
                rank: self.rank,
                waiting_for: format!("stage {} (gradient)", self.coord.stage - 1),
            })?;
        }
        Ok(grads)
    }
}

//! [`Worker`]: one rank's state, its command loop and the helpers its passes share.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;

use super::protocol::{Command, Reply, ReplyBody, WorkerSetup};
use crate::context::ContextParallelBackend;
use crate::data::BatchSource;
use crate::gradients::GradientReducer;
use crate::mesh::{Control, Links, RankGrid, RankCoord};
use crate::meter::{MemoryMeter, ThreadAllocatorMeter};
use crate::stage::{StageModule, trainable};
use crate::{CpMode, ParallelError};
use crate::trainer::InjectedFault;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

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

/// One rank: its stage, links, optimizer settings and what it measures during a step.
pub(super) struct Worker<B: ContextParallelBackend> {
    pub(super) rank: usize,
    pub(super) coord: RankCoord,
    pub(super) shape: RankGrid,
    pub(super) device: B::Device,
    pub(super) inner_device: B::Device,
    pub(super) module: Option<StageModule<B>>,
    optimizer: AdamWConfig,
    pub(super) links: Links<Inner<B>>,
    pub(super) control: Arc<Control>,
    pub(super) source: Arc<dyn BatchSource<B>>,
    pub(super) reducer: Option<GradientReducer>,
    pub(super) fault: Option<InjectedFault>,
    pub(super) meter: Arc<dyn MemoryMeter>,
    /// How the context group attends.
    pub(super) cp_mode: CpMode,
    /// Label smoothing ε of the loss (last stage).
    pub(super) label_smoothing: f64,
    commands: Receiver<Command<B>>,
    replies: Sender<Reply<B>>,
    /// Time spent waiting for pipeline messages and the all-reduce during the current step.
    pub(super) waited: Cell<Duration>,
    /// The largest distance index of the current step's micro-batches: (bytes held, dense bytes).
    pub(super) index_bytes: Cell<(usize, usize)>,
}

impl<B: ContextParallelBackend> Worker<B> {
    pub(super) fn start(setup: WorkerSetup<B>) -> Result<Self, ParallelError> {
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
            cp_mode: setup.cp_mode,
            label_smoothing: setup.label_smoothing,
            commands: setup.commands,
            replies: setup.replies,
            waited: Cell::new(Duration::ZERO),
            index_bytes: Cell::new((0, 0)),
        };
        worker.reply(Ok(ReplyBody::Ready));
        Ok(worker)
    }

    pub(super) fn reply(&self, body: Result<ReplyBody<B>, ParallelError>) {
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

    pub(super) fn serve(mut self) -> Result<(), ParallelError> {
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

    pub(super) fn module(&self) -> Result<&StageModule<B>, ParallelError> {
        self.module
            .as_ref()
            .ok_or_else(|| self.internal("stage module missing"))
    }

    pub(super) fn internal(&self, message: &str) -> ParallelError {
        ParallelError::WorkerPanicked {
            rank: self.rank,
            message: format!("internal error: {message}"),
        }
    }

    pub(super) fn is_last(&self) -> bool {
        self.coord.stage + 1 == self.shape.pp
    }

    /// The step's peak memory from the rank's meter (`None` when it cannot measure here),
    /// after the backend ran everything queued.
    pub(super) fn peak_bytes(&self) -> Option<usize> {
        if !self.meter.available() {
            return None;
        }
        B::sync(&self.device).ok();
        Some(self.meter.peak() as usize)
    }
}

//! What the coordinator and a worker tell each other, and what a worker starts with.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use burn::optim::AdamWConfig;
use burn::tensor::backend::AutodiffBackend;

use super::report::RankReport;
use crate::context::ContextParallelBackend;
use crate::data::BatchSource;
use crate::mesh::{Control, Links, RankGrid};
use crate::meter::MemoryMeter;
use crate::stage::StageModule;
use crate::trainer::InjectedFault;
use crate::{CpMode, NodeConfig, OptimizerRecord, ParallelError};

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
    pub shape: RankGrid,
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
    pub cp_mode: CpMode,
    /// Label smoothing ε of the last stage's loss.
    pub label_smoothing: f64,
    pub commands: Receiver<Command<B>>,
    pub replies: Sender<Reply<B>>,
}

//! [`ParallelTrainer`]: the front door. It validates a [`ParallelConfig`], starts one worker
//! thread per rank, runs optimizer steps on the mesh and gathers the parameters back.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, Optimizer};
use burn::module::Module;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::{GraphTransformer, materialize};

use crate::context::ContextParallelBackend;
use crate::data::{BatchSource, padded_len, shard_sequences};
use crate::gradients::{self, CollectiveLease, SegmentLayout};
use crate::mesh::{Control, MeshShape, RankCoord, build_links};
use crate::meter::MemoryMeter;
use crate::stage::StageModule;
use crate::worker::{self, Command, Reply, ReplyBody, StepPlan, WorkerSetup};
use crate::{NodeConfig, ParallelConfig, ParallelError, RankReport};

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// How long the coordinator waits for the other ranks to report after a first failure.
const FAILURE_GRACE: Duration = Duration::from_secs(10);
/// How often the coordinator looks at its replies.
const POLL: Duration = Duration::from_millis(20);

/// A deliberate panic, for tests of failure handling: rank `rank` panics at the start of its
/// first forward pass of step `step` (steps count from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectedFault {
    /// The rank that panics.
    pub rank: usize,
    /// The step at which it panics.
    pub step: u64,
}

/// The optimizer state of a model (or of one stage): AdamW's moments and step count per
/// parameter id, the record of Burn's `OptimizerAdaptor<AdamW, _, B>`. Parameter ids are those
/// of the model given to [`ParallelTrainer::new`], so the record of the whole mesh is the record
/// a single-device AdamW over the same model would hold, and either can resume the other.
pub type OptimizerRecord<B> =
    <OptimizerAdaptor<AdamW, GraphTransformer<B>, B> as Optimizer<GraphTransformer<B>, B>>::Record;

/// Options of a [`ParallelTrainer`] besides the mesh shape.
#[derive(Clone, Debug)]
pub struct TrainerOptions {
    /// The optimizer every stage runs on its own parameters (AdamW is element-wise, so the
    /// update equals the single-device one given the same gradients).
    pub optimizer: AdamWConfig,
    /// Nodes per sequence as the batch source delivers them; padded to a multiple of `cp`.
    pub seq_len: usize,
    /// The usual number of sequences per step (checked against `dp` and `micro_batches` by
    /// [`ParallelConfig::validate`]; a step may take any number of at least
    /// `dp * micro_batches`, e.g. a smaller last batch of an epoch).
    pub sequences_per_step: usize,
    /// How long a rank waits for a peer before giving up. Default: 600 s.
    pub timeout: Duration,
    /// A deliberate panic, for tests. Default: none.
    pub fault: Option<InjectedFault>,
    /// This process's place in a multi-node run; `None` (the default) or one node: this
    /// process trains alone. See [`nodes`](crate::nodes).
    pub nodes: Option<NodeConfig>,
    /// How each rank measures its [`RankReport::peak_bytes`]. Default (`None`):
    /// [`ThreadAllocatorMeter`](crate::ThreadAllocatorMeter), which measures only when
    /// [`CountingAllocator`](crate::CountingAllocator) is the global allocator (CPU backends);
    /// on a GPU backend give a [`CubeMemoryMeter`](crate::meter) of the device.
    pub meter: Option<Arc<dyn MemoryMeter>>,
    /// Threads of each rank's own rayon pool, where CPU backends run their parallel ops (see
    /// [`threads`](crate::threads)). Default (`None`): this machine's cores divided among this
    /// process's ranks ([`default_threads_per_rank`](crate::threads::default_threads_per_rank)).
    pub threads_per_rank: Option<usize>,
}

impl TrainerOptions {
    /// Options with AdamW's defaults, for sequences of `seq_len` nodes and `sequences_per_step`
    /// sequences per step.
    pub fn new(seq_len: usize, sequences_per_step: usize) -> Self {
        Self {
            optimizer: AdamWConfig::new(),
            seq_len,
            sequences_per_step,
            timeout: Duration::from_secs(600),
            fault: None,
            nodes: None,
            meter: None,
            threads_per_rank: None,
        }
    }

    /// Sets the optimizer.
    pub fn with_optimizer(mut self, optimizer: AdamWConfig) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// Sets the peer timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Injects a panic (tests of failure handling).
    pub fn with_fault(mut self, fault: InjectedFault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// Sets how each rank measures its peak memory (see [`TrainerOptions::meter`]).
    pub fn with_meter(mut self, meter: Arc<dyn MemoryMeter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Sets the threads of each rank's rayon pool (see [`TrainerOptions::threads_per_rank`]).
    pub fn with_threads_per_rank(mut self, threads: usize) -> Self {
        self.threads_per_rank = Some(threads);
        self
    }

    /// Makes this process node `nodes.node_rank` of a multi-node run: data parallelism then
    /// spans `nodes.num_nodes` processes (see [`nodes`](crate::nodes)).
    pub fn with_nodes(mut self, nodes: NodeConfig) -> Self {
        self.nodes = Some(nodes);
        self
    }
}

/// The outcome of one optimizer step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// The loss of the step: masked cross-entropy summed over all sequences divided by
    /// `train_nodes` (the single-device trainer's loss; over every process's sequences in a
    /// multi-node run). 0 when `train_nodes` is 0.
    pub loss: f64,
    /// Training nodes in the step's sequences. 0 means the step did nothing (like the
    /// single-device trainer, a batch without training nodes is skipped).
    pub train_nodes: usize,
    /// Wall time of the step, in seconds.
    pub seconds: f64,
    /// What each rank of this process measured, in rank order (empty for a skipped step).
    pub ranks: Vec<RankReport>,
}

/// Trains a [`GraphTransformer`] on a `pp x cp x dp` mesh of worker threads.
///
/// - data parallelism: a step's sequences are sharded over `dp` replicas; every replica runs
///   the same optimizer step after the gradient all-reduce;
/// - context parallelism: each sequence is split into `cp` blocks, attention runs as an exact
///   ring over them ([`ring_attention`](crate::ring_attention));
/// - pipeline parallelism: `pp` stages holding `config.stage_layers` layers each (any split),
///   run with a 1F1B schedule over `micro_batches` micro-batches per replica; the spatial
///   table's value travels forward with the activations and its gradient back to stage 0.
///
/// The loss of every micro-batch is normalized by the number of training nodes of the WHOLE
/// step, and gradients are summed over each stage's `dp x cp` group, so with dropout 0 a step
/// computes the single-device loss and gradients (up to float rounding) whatever the mesh.
///
/// When a worker fails (error or panic) the mesh stops within a fraction of a second and the
/// call returns the failure naming the rank; the trainer is then unusable
/// ([`ParallelError::Stopped`]).
///
/// With [`TrainerOptions::with_nodes`], several processes run this mesh each and data
/// parallelism spans them (see [`nodes`](crate::nodes)): every process calls
/// [`step`](Self::step) with the same sequences.
pub struct ParallelTrainer<B: ContextParallelBackend> {
    config: ParallelConfig,
    shape: MeshShape,
    source: Arc<dyn BatchSource<B>>,
    commands: Vec<Sender<Command<B>>>,
    replies: Receiver<Reply<B>>,
    handles: Vec<JoinHandle<()>>,
    control: Arc<Control>,
    reduces: bool,
    device: B::Device,
    step: u64,
    failure: Option<ParallelError>,
    lease: Option<CollectiveLease>,
    /// The multi-node setup, when more than one node takes part.
    nodes: Option<NodeConfig>,
}

impl<B: ContextParallelBackend> ParallelTrainer<B> {
    /// Validates `config` against `model` and `options`, splits `model` into stages and starts
    /// the mesh: one thread per rank, rank `r` on `devices[r]` (or all on `devices[0]` when one
    /// device is given). Every rank starts from `model`'s parameters.
    ///
    /// `model` should have its parameters initialized (it is copied to every rank); its device
    /// is where [`model`](Self::model) returns the trained parameters.
    ///
    /// In a multi-node run, `config` is the mesh of this process (every node runs the same)
    /// and is validated with `dp` replaced by the run's `num_nodes * dp`; this call returns
    /// once every node registered with the orchestrator (or fails after `options.timeout`).
    ///
    /// # Errors
    ///
    /// [`ParallelError::Config`] for a configuration that does not fit (via
    /// [`ParallelConfig::validate`] with the sequence length padded to a multiple of `cp`),
    /// [`ParallelError::DeviceCount`], [`ParallelError::Nodes`] for a bad multi-node setup, or
    /// the first worker's setup failure.
    pub fn new(
        config: ParallelConfig,
        model: GraphTransformer<Inner<B>>,
        source: Arc<dyn BatchSource<B>>,
        options: TrainerOptions,
        devices: Vec<B::Device>,
    ) -> Result<Self, ParallelError> {
        let layers = model.layers.len();
        let nodes = match &options.nodes {
            Some(nodes) => {
                nodes.validate()?;
                nodes.is_multi_node().then(|| nodes.clone())
            }
            None => None,
        };
        let mut global = config.clone();
        if let Some(nodes) = &nodes {
            global.dp = nodes.global_dp(config.dp);
        }
        global.validate(
            layers,
            padded_len(options.seq_len, config.cp),
            options.sequences_per_step,
        )?;
        let shape = MeshShape::of(&config);
        let world = shape.world();
        let threads = options
            .threads_per_rank
            .unwrap_or_else(|| crate::threads::default_threads_per_rank(world));
        let devices = match devices.len() {
            1 => vec![devices[0].clone(); world],
            n if n == world => devices,
            given => return Err(ParallelError::DeviceCount { given, world }),
        };
        let device = model
            .devices()
            .into_iter()
            .next()
            .unwrap_or_else(|| devices[0].clone());
        // materialize lazily initialized parameters here, once: a clone of an uninitialized
        // parameter would be initialized again (differently) by every rank
        let model = materialize(model);
        let stages = StageModule::split(model, &config)?;
        let stage_lengths: Vec<usize> = stages
            .iter()
            .map(|stage| SegmentLayout::of::<Inner<B>, _>(stage).len())
            .collect();
        let reduces = config.cp * config.dp > 1 || nodes.is_some();
        if let Some(nodes) = &nodes {
            nodes.check_data_port()?;
        }
        let lease = if reduces {
            let lease =
                CollectiveLease::acquire(options.timeout).ok_or(ParallelError::CollectiveBusy {
                    seconds: options.timeout.as_secs_f64(),
                })?;
            Some(lease)
        } else {
            None
        };
        if reduces && nodes.is_none() {
            // a previous mesh that failed may have left peers behind
            gradients::reset::<Inner<B>>();
        }
        let control = Arc::new(Control::new(options.timeout));
        let links = build_links::<Inner<B>>(shape, &devices, &control);
        let (reply_tx, replies) = channel();
        let mut commands = Vec::with_capacity(world);
        let mut handles = Vec::with_capacity(world);
        for ((rank, links), device) in links.into_iter().enumerate().zip(devices) {
            let coord = shape.coord(rank);
            let (command_tx, command_rx) = channel();
            commands.push(command_tx);
            let setup = WorkerSetup::<B> {
                rank,
                shape,
                device,
                module: stages[coord.stage].clone(),
                optimizer: options.optimizer.clone(),
                links,
                control: control.clone(),
                source: source.clone(),
                reduce: reduces.then(|| stage_lengths.clone()),
                nodes: nodes.clone(),
                fault: options.fault,
                meter: options.meter.clone(),
                threads,
                commands: command_rx,
                replies: reply_tx.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!(
                    "megagraph-rank-{rank}-s{}c{}d{}",
                    coord.stage, coord.cp_rank, coord.dp_rank
                ))
                .spawn(move || worker::run(setup))
                .map_err(|err| ParallelError::WorkerPanicked {
                    rank,
                    message: format!("cannot start the thread: {err}"),
                })?;
            handles.push(handle);
        }
        let mut trainer = Self {
            config,
            shape,
            source,
            commands,
            replies,
            handles,
            control,
            reduces,
            device,
            step: 0,
            failure: None,
            lease,
            nodes,
        };
        let all: Vec<usize> = (0..world).collect();
        trainer.collect(&all, |body| matches!(body, ReplyBody::Ready))?;
        log::info!(
            "parallel mesh pp={} cp={} dp={} ({} ranks, stage layers {:?}) is up{}",
            trainer.config.pp,
            trainer.config.cp,
            trainer.config.dp,
            world,
            trainer.config.stage_layers,
            match &trainer.nodes {
                Some(nodes) => format!(
                    " as node {} of {} (global dp = {})",
                    nodes.node_rank,
                    nodes.num_nodes,
                    nodes.global_dp(trainer.config.dp)
                ),
                None => String::new(),
            }
        );
        Ok(trainer)
    }

    /// The configuration of the mesh.
    pub fn config(&self) -> &ParallelConfig {
        &self.config
    }

    /// The coordinates of every rank, in rank order.
    pub fn ranks(&self) -> Vec<RankCoord> {
        self.shape.coords().collect()
    }

    /// Runs one optimizer step with learning rate `lr` on `sequences` (indices into the batch
    /// source), sharded over the replicas and micro-batches. In a multi-node run `sequences`
    /// are the whole step's, the same on every node: they are sharded over all `num_nodes * dp`
    /// replicas and this node runs its own.
    ///
    /// # Errors
    ///
    /// [`ParallelError::TooFewSequences`] (the mesh stays usable), a worker's failure (the mesh
    /// stops), or [`ParallelError::Stopped`] after an earlier failure.
    pub fn step(&mut self, sequences: &[usize], lr: f64) -> Result<StepOutput, ParallelError> {
        if let Some(failure) = &self.failure {
            return Err(ParallelError::Stopped(Box::new(failure.clone())));
        }
        let replicas = match &self.nodes {
            None => shard_sequences(sequences, self.config.dp, self.config.micro_batches)?,
            Some(nodes) => {
                let dp = self.config.dp;
                shard_sequences(sequences, nodes.global_dp(dp), self.config.micro_batches)?
                    .into_iter()
                    .skip(nodes.node_rank * dp)
                    .take(dp)
                    .collect()
            }
        };
        let train_nodes = self.source.train_nodes(sequences);
        if train_nodes == 0 {
            return Ok(StepOutput {
                loss: 0.0,
                train_nodes: 0,
                seconds: 0.0,
                ranks: Vec::new(),
            });
        }
        let started = Instant::now();
        let plan = Arc::new(StepPlan {
            step: self.step,
            replicas,
            lr,
            train_nodes,
        });
        self.step += 1;
        let all: Vec<usize> = (0..self.shape.world()).collect();
        for rank in &all {
            self.send(*rank, Command::Step(plan.clone()))?;
        }
        let replies = self.collect(&all, |body| matches!(body, ReplyBody::Step(..)))?;
        let mut reduced_loss = None;
        let mut ranks: Vec<RankReport> = replies
            .into_iter()
            .filter_map(|(_, body)| match body {
                ReplyBody::Step(report, summed) => {
                    reduced_loss = reduced_loss.or(summed);
                    Some(report)
                }
                _ => None,
            })
            .collect();
        ranks.sort_by_key(|report| report.rank);
        let loss = match (&self.nodes, reduced_loss) {
            // the loss of every node, summed by the all-reduce
            (Some(_), Some(summed)) => summed,
            _ => ranks.iter().map(|report| report.loss).sum(),
        };
        Ok(StepOutput {
            loss,
            train_nodes,
            seconds: started.elapsed().as_secs_f64(),
            ranks,
        })
    }

    /// The current parameters, gathered from replica `(cp_rank 0, dp_rank 0)` of every stage
    /// (of this process) onto the device of the model given to [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn model(&mut self) -> Result<GraphTransformer<Inner<B>>, ParallelError> {
        self.replica_model(0, 0)
    }

    /// The optimizer state of the whole model, gathered from replica `(cp_rank 0, dp_rank 0)` of
    /// every stage (every replica holds the same state). Save it with the model to resume.
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>, ParallelError> {
        let ranks = self.replica_ranks(0, 0)?;
        for rank in &ranks {
            self.send(*rank, Command::ExportOptimizer)?;
        }
        let replies = self.collect(&ranks, |body| matches!(body, ReplyBody::Optimizer(_)))?;
        let mut record: OptimizerRecord<B> = Default::default();
        for (_, body) in replies {
            if let ReplyBody::Optimizer(stage) = body {
                record.extend(stage);
            }
        }
        Ok(record)
    }

    /// Replaces the optimizer state of every rank by `record` (each keeps the entries of its
    /// stage's parameters): resumes from a saved [`optimizer_record`](Self::optimizer_record) or
    /// from a single-device AdamW's record over the same parameters.
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn load_optimizer_record(
        &mut self,
        record: OptimizerRecord<B>,
    ) -> Result<(), ParallelError> {
        if let Some(failure) = &self.failure {
            return Err(ParallelError::Stopped(Box::new(failure.clone())));
        }
        let record = Arc::new(record);
        let all: Vec<usize> = (0..self.shape.world()).collect();
        for rank in &all {
            self.send(*rank, Command::ImportOptimizer(record.clone()))?;
        }
        self.collect(&all, |body| matches!(body, ReplyBody::OptimizerLoaded))?;
        Ok(())
    }

    /// The current parameters as held by the ranks `(stage, cp_rank, dp_rank)` of every stage.
    /// Every replica holds the same parameters (up to the all-reduce's float rounding); tests
    /// use this to check it.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Model`] for a replica outside the mesh, a worker's failure, or
    /// [`ParallelError::Stopped`].
    pub fn replica_model(
        &mut self,
        cp_rank: usize,
        dp_rank: usize,
    ) -> Result<GraphTransformer<Inner<B>>, ParallelError> {
        let ranks = self.replica_ranks(cp_rank, dp_rank)?;
        for rank in &ranks {
            self.send(*rank, Command::Snapshot)?;
        }
        let mut replies = self.collect(&ranks, |body| matches!(body, ReplyBody::Snapshot(_)))?;
        replies.sort_by_key(|(rank, _)| *rank);
        let stages: Vec<StageModule<Inner<B>>> = replies
            .into_iter()
            .filter_map(|(_, body)| match body {
                ReplyBody::Snapshot(module) => Some(module.to_device(&self.device)),
                _ => None,
            })
            .collect();
        StageModule::assemble(stages).ok_or(ParallelError::Model {
            field: "stages",
            value: self.shape.pp,
            reason: "the stages did not hold the embedding stage and the head",
        })
    }

    /// The ranks of replica `(cp_rank, dp_rank)`, one per stage in stage order.
    fn replica_ranks(&self, cp_rank: usize, dp_rank: usize) -> Result<Vec<usize>, ParallelError> {
        if let Some(failure) = &self.failure {
            return Err(ParallelError::Stopped(Box::new(failure.clone())));
        }
        if cp_rank >= self.shape.cp || dp_rank >= self.shape.dp {
            return Err(ParallelError::Model {
                field: "replica",
                value: cp_rank.max(dp_rank),
                reason: "cp_rank and dp_rank must be below cp and dp",
            });
        }
        Ok((0..self.shape.pp)
            .map(|stage| {
                self.shape.rank(RankCoord {
                    stage,
                    cp_rank,
                    dp_rank,
                })
            })
            .collect())
    }

    /// Whether a failure resets the process's collective to release waiting ranks: in a
    /// single-process mesh that all-reduces. Not in multi-node mode: burn-collective's server
    /// may then be gone or blocked on another node (its client would panic or block), and the
    /// ranks' waits on it are guarded instead.
    fn resets(&self) -> bool {
        self.reduces && self.nodes.is_none()
    }

    fn send(&mut self, rank: usize, command: Command<B>) -> Result<(), ParallelError> {
        if self.commands[rank].send(command).is_err() {
            let error = ParallelError::PeerGone {
                rank,
                waiting_for: "commands (the worker thread ended)".to_string(),
            };
            self.stop(error.clone());
            return Err(error);
        }
        Ok(())
    }

    /// Records the first failure and stops every rank.
    fn stop(&mut self, error: ParallelError) {
        self.control.abort();
        if self.resets() {
            // releases ranks blocked in an all-reduce with a failed peer
            gradients::reset::<Inner<B>>();
        }
        if self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    /// Waits for one reply from each of `ranks`. On a failure, stops the mesh, waits a little
    /// for the others (so the root cause wins over "aborted" reports) and returns it.
    fn collect(
        &mut self,
        ranks: &[usize],
        expected: impl Fn(&ReplyBody<B>) -> bool,
    ) -> Result<Vec<(usize, ReplyBody<B>)>, ParallelError> {
        let mut pending: Vec<bool> = vec![false; self.shape.world()];
        for &rank in ranks {
            pending[rank] = true;
        }
        let mut remaining = ranks.len();
        let mut got = Vec::with_capacity(ranks.len());
        let mut first: Option<ParallelError> = None;
        let mut failed_at: Option<Instant> = None;
        while remaining > 0 {
            match self.replies.recv_timeout(POLL) {
                Ok(Reply { rank, body }) => {
                    if rank < pending.len() && pending[rank] {
                        pending[rank] = false;
                        remaining -= 1;
                    }
                    match body {
                        Ok(body) if expected(&body) => got.push((rank, body)),
                        Ok(_) => {
                            let error = ParallelError::OutOfOrder {
                                rank,
                                expected: "the reply to the current command".into(),
                                got: "another reply".into(),
                            };
                            first = Some(prefer(first, error));
                        }
                        Err(error) => {
                            if failed_at.is_none() {
                                failed_at = Some(Instant::now());
                                self.control.abort();
                                if self.resets() {
                                    gradients::reset::<Inner<B>>();
                                }
                            }
                            first = Some(prefer(first, error));
                        }
                    }
                }
                // no overall deadline: a step may legitimately take long, and every wait of a
                // worker on a peer has its own timeout
                Err(RecvTimeoutError::Timeout) => {
                    if failed_at.is_some_and(|at| at.elapsed() > FAILURE_GRACE) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if first.is_none() && remaining > 0 {
            let rank = pending.iter().position(|&p| p).unwrap_or(0);
            first = Some(ParallelError::PeerGone {
                rank,
                waiting_for: "a reply (the worker thread ended)".into(),
            });
        }
        match first {
            Some(error) => {
                self.stop(error.clone());
                Err(error)
            }
            None => Ok(got),
        }
    }
}

/// The more informative of two failures: a root cause over a consequence, else the first.
fn prefer(first: Option<ParallelError>, next: ParallelError) -> ParallelError {
    match first {
        Some(first) if !first.is_consequence() || next.is_consequence() => first,
        _ => next,
    }
}

impl<B: ContextParallelBackend> Drop for ParallelTrainer<B> {
    fn drop(&mut self) {
        for command in &self.commands {
            let _ = command.send(Command::Shutdown);
        }
        self.commands.clear();
        let deadline = Instant::now() + FAILURE_GRACE;
        for handle in self.handles.drain(..) {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            if handle.is_finished() {
                let _ = handle.join();
            } else {
                log::warn!("a worker thread did not stop; leaving it behind");
                self.control.abort();
            }
        }
        if self.failure.is_some() && self.resets() {
            gradients::reset::<Inner<B>>();
        }
        // release the collective only after every rank left it
        drop(self.lease.take());
    }
}

//! [`ParallelTrainer`]: starting the mesh and reading the parameters back.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use burn::module::Module;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::{GraphTransformer, materialize};

use super::options::TrainerOptions;
use crate::context::ContextParallelBackend;
use crate::data::{BatchSource, padded_len};
use crate::gradients::{self, CollectiveLease, SegmentLayout};
use crate::mesh::{Control, RankGrid, RankCoord, build_links};
use crate::stage::StageModule;
use crate::worker::{self, Command, Reply, ReplyBody, WorkerSetup};
use crate::{CpMode, NodeConfig, ParallelConfig, ParallelError};

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

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
    pub(super) config: ParallelConfig,
    pub(super) shape: RankGrid,
    pub(super) source: Arc<dyn BatchSource<B>>,
    pub(super) commands: Vec<Sender<Command<B>>>,
    pub(super) replies: Receiver<Reply<B>>,
    pub(super) handles: Vec<JoinHandle<()>>,
    pub(super) control: Arc<Control>,
    pub(super) reduces: bool,
    pub(super) device: B::Device,
    pub(super) step: u64,
    pub(super) failure: Option<ParallelError>,
    pub(super) lease: Option<CollectiveLease>,
    /// The multi-node setup, when more than one node takes part.
    pub(super) nodes: Option<NodeConfig>,
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
    /// [`ParallelError::DeviceCount`], [`ParallelError::Nodes`] for a bad multi-node setup,
    /// [`ParallelError::Model`] for a model the mesh cannot run (with Ulysses, `cp_mode =
    /// ulysses` and `cp > 1`: heads not a multiple of `cp`, or an edge encoding), or the first
    /// worker's setup failure.
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
        let shape = RankGrid::of(&config);
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
        if config.cp_mode == CpMode::Ulysses
            && config.cp > 1
            && let Some(heads) = model.layers.first().map(|layer| layer.attention.num_heads)
            && !heads.is_multiple_of(config.cp)
        {
            return Err(ParallelError::Model {
                field: "num_heads",
                value: heads,
                reason: "Ulysses (cp_mode = ulysses) needs a multiple of cp heads: each context rank attends for heads / cp of them",
            });
        }
        if config.cp_mode == CpMode::Ulysses && config.cp > 1 && model.edge_encoding.is_some() {
            return Err(ParallelError::Model {
                field: "edge_encoding",
                value: 1,
                reason: "the edge encoding's dense bias runs with the ring (cp_mode = ring) only: Ulysses' all-to-all would communicate it",
            });
        }
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
                cp_mode: config.cp_mode,
                label_smoothing: options.label_smoothing,
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

    /// The current parameters, gathered from replica `(cp_rank 0, dp_rank 0)` of every stage
    /// (of this process) onto the device of the model given to [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn model(&mut self) -> Result<GraphTransformer<Inner<B>>, ParallelError> {
        self.replica_model(0, 0)
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
    pub(super) fn replica_ranks(
        &self,
        cp_rank: usize,
        dp_rank: usize,
    ) -> Result<Vec<usize>, ParallelError> {
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
}

//! [`NodeClassificationTrainer`]: the one training loop of the command line and of library
//! users who want epochs, early stopping and checkpoints without burn-train. The loop
//! ([`fit_on`](NodeClassificationTrainer::fit_on)) is a few named steps, each in its file:
//! resume (`resume.rs`), epoch (`epoch.rs`: the stopping rule and the optimizer steps),
//! evaluate (`evaluate.rs`, with the snapshot ensemble of `ensemble.rs`) and report
//! (`report.rs`), and around them the rounds of
//! self-training (`self_training.rs`); the steps themselves run on one device or
//! a mesh through the crate's step engines (`engine/`).

mod ensemble;
mod epoch;
mod evaluate;
mod report;
mod resume;
mod self_training;

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module};
use burn::optim::AdamWConfig;
use megagraph_models::{GraphTransformer, GraphTransformerConfig};
use megagraph_parallel::{ContextParallelBackend, CpMode, NodeConfig, OptimizerRecord, ParallelConfig};

use crate::attention::AttentionMode;
use crate::attention_schedule::AttentionSchedule;
use crate::checkpoint::Checkpointer;
use crate::config::{MeshConfig, RunContext, TrainConfig};
use crate::consistency::ConsistencyRegularization;
use crate::data::SequenceDataset;
use crate::engine::{EngineSetup, L2Penalty, MeshEngine, SingleDeviceEngine, StepEngine};
use crate::error::{Result, TrainError};
use crate::mesh_plan::MeshPlan;
use crate::metrics::EpochMetrics;
use crate::parallel::{StepShape, resolve_layout};
use crate::input_propagation::InputPropagation;
use crate::label_input::LabelInput;
use crate::prediction_propagation::PredictionPropagation;
use crate::prepare::train_fraction;
use crate::prefetch::RowLayout;

pub use evaluate::SplitAccuracy;
use ensemble::SnapshotEnsemble;
use crate::observer::{TrainObserver, TrainOutcome};

/// Node-classification training of a [`GraphTransformer`] on a [`SequenceDataset`]: AdamW with
/// warm-up and cosine decay, early stopping on validation accuracy, the best-validation model
/// kept, checkpoints after every epoch.
///
/// Steps run on one device, or on the `pp x cp x dp` mesh of the config's `[mesh]` section
/// (worker threads through [`megagraph_parallel::ParallelTrainer`]). Either way a step takes the
/// same sequences, so with dropout 0 the losses agree; checkpoints hold the whole model and its
/// optimizer state, so a run may resume on another mesh.
pub struct NodeClassificationTrainer<'a> {
    /// The configuration as given.
    given: &'a TrainConfig,
    /// `given` with the unset fields of its recipe set for this run ([`TrainConfig::resolved`]).
    config: TrainConfig,
    data: Arc<SequenceDataset>,
    nodes: Option<NodeConfig>,
    /// APPNP's propagation of the logits (`[model] propagation_steps`), if on.
    propagation: Option<Arc<PredictionPropagation>>,
    /// GRAND's random propagation of the encoded rows (`[model] input_propagation_steps`), if on.
    input_propagation: Option<Arc<InputPropagation>>,
    /// The seconds epoch `epoch` (1-based), started at the given instant, took as `β`'s tuner
    /// reads them ([`with_beta_clock`](Self::with_beta_clock)).
    epoch_seconds: fn(usize, Instant) -> f64,
}

impl<'a> NodeClassificationTrainer<'a> {
    /// A trainer for `data` (a [`SequenceDataset`] or an `Arc` of one) configured by `config`.
    ///
    /// The unset fields of `config`'s recipe take their values for this run
    /// ([`RunContext`]: one device or a mesh, and the share of `data`'s nodes in its training
    /// split); prepare `data` with the same `config` (its `[mesh]` included).
    pub fn new(config: &'a TrainConfig, data: impl Into<Arc<SequenceDataset>>) -> Self {
        let data: Arc<SequenceDataset> = data.into();
        let mut trainer = Self {
            given: config,
            config: config.clone(),
            propagation: None,
            input_propagation: None,
            data,
            nodes: None,
            epoch_seconds: |_, started| started.elapsed().as_secs_f64(),
        };
        trainer.resolve();
        trainer
    }

    /// The run this trainer's unset recipe fields follow.
    pub fn run_context(&self) -> RunContext {
        RunContext {
            parallel: self.is_parallel(),
            train_fraction: train_fraction(&self.data.dataset),
        }
    }

    /// The configuration this trainer trains with: the one given, with the unset fields of its
    /// recipe set for this run ([`TrainConfig::resolved`]).
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Sets [`config`](Self::config) and the propagation from the given configuration and the
    /// run.
    fn resolve(&mut self) {
        let run = self.run_context();
        self.config = self.given.resolved(run);
        let graph = &self.data.dataset.graph;
        self.propagation = PredictionPropagation::from_config(&self.config, run, graph).map(Arc::new);
        self.input_propagation = InputPropagation::from_config(&self.config, run, graph).map(Arc::new);
    }

    /// Makes this process one node of a multi-node run: every node runs the `[mesh]` layout
    /// (one device when the layout is `1 x 1 x 1`) and data parallelism spans the nodes. Every
    /// node must train with the same configuration and data; only node 0 writes checkpoints.
    /// Several nodes run the mesh engine, so the recipe's unset fields take their values for a
    /// parallel run ([`RunContext`]): prepare their data with `data.feature_hops` set
    /// ([`TrainConfig::feature_hops`] of a parallel run is 2) unless `[mesh]` is parallel too.
    pub fn with_nodes(mut self, nodes: NodeConfig) -> Self {
        self.nodes = Some(nodes).filter(NodeConfig::is_multi_node);
        self.resolve();
        self
    }

    /// Sets the clock `β`'s tuner (`reform_threshold = "tuned"`) reads each epoch's seconds
    /// from: `clock(epoch, started)` for epoch `epoch` (1-based) started at `started`. Default:
    /// the wall clock, `started.elapsed()`. The tuned `β` follows the loss decrease per second,
    /// so a fixed clock makes a tuned run reproducible (to compare a resumed run with an
    /// uninterrupted one, say); the reported seconds stay the wall clock's.
    pub fn with_beta_clock(mut self, clock: fn(usize, Instant) -> f64) -> Self {
        self.epoch_seconds = clock;
        self
    }

    /// Whether this process writes checkpoints and reports (node 0, or a single process).
    pub fn is_lead(&self) -> bool {
        self.nodes.as_ref().is_none_or(|nodes| nodes.node_rank == 0)
    }

    /// The dataset.
    pub fn data(&self) -> &SequenceDataset {
        &self.data
    }

    /// Whether steps run on the mesh engine: a parallel `[mesh]` layout, or several nodes.
    fn is_parallel(&self) -> bool {
        self.config.mesh.is_parallel() || self.nodes.is_some()
    }

    /// The model configuration this trainer builds for its dataset.
    pub fn model_config(&self) -> GraphTransformerConfig {
        let d = &self.data.dataset;
        self.config
            .model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes)
            .with_edge_encoding(self.data.has_edge_paths().then(|| d.edge_feature_dim()))
    }

    /// The mesh layout the `[mesh]` section asks for, checked against the model and the data;
    /// `None` for single-device training.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming the field when the layout cannot run, or a plan
    /// error.
    pub fn layout(&self) -> Result<Option<ParallelConfig>> {
        if !self.is_parallel() {
            return Ok(None);
        }
        // [`TrainConfig::validate`] checks a parallel `[mesh]`; several nodes run the mesh
        // engine too
        self.given.check_one_device_only(true)?;
        let steps = StepShape {
            seq_len: self.data.seq_len,
            sequences_per_step: self.batch_size(),
            num_sequences: self.data.num_sequences(),
            nodes: self.nodes.as_ref().map_or(1, |nodes| nodes.num_nodes),
            // the planner's memory model counts the sparse index as it will be built
            near_pairs_per_row: matches!(self.config.mesh.plan, Some(MeshPlan::Auto)).then(|| self.data.near_pairs_per_row()),
        };
        let layout = resolve_layout(&self.config.mesh, &self.model_config(), steps)?;
        if self.data.has_edge_paths() && layout.cp > 1 && layout.cp_mode == CpMode::Ulysses {
            // each ring rank computes its rows of the edge encoding's bias; Ulysses would have to
            // send them through its all-to-all (a plan file or `plan = "auto"` may choose it)
            return Err(TrainError::InvalidConfig {
                field: "mesh.cp_mode",
                reason: format!(
                    "the edge encoding runs with cp > 1 on the ring only (cp_mode = \"ring\"), and the layout has cp = {} with cp_mode = ulysses",
                    layout.cp
                ),
            });
        }
        Ok(Some(layout))
    }

    fn batch_size(&self) -> usize {
        self.config
            .training
            .batch_size
            .min(self.data.num_sequences())
            .max(1)
    }

    /// Identifies what a checkpoint was trained on; the mesh layout is left out, so a run can
    /// resume on another layout.
    fn fingerprint(&self) -> String {
        let mut config = self.config.clone();
        config.training.epochs = 0;
        config.training.max_steps = None;
        config.training.resume = false;
        config.training.metrics_out = None;
        config.training.plot_dir = None;
        config.mesh = MeshConfig::default();
        format!(
            "{:?}",
            (
                config,
                self.data.dataset.name.as_str(),
                self.data.num_sequences()
            )
        )
    }

    /// Trains on `device` (every rank of a mesh uses it) and returns the best-validation model
    /// with the report.
    ///
    /// # Errors
    ///
    /// An invalid layout or configuration, a checkpoint that cannot be written or read, a mesh
    /// failure naming the rank, or [`TrainError::Interrupted`] when `observer` asks to stop.
    pub fn fit<B>(
        &self,
        device: &B::Device,
        observer: &mut dyn TrainObserver,
    ) -> Result<TrainOutcome<B::InnerBackend>>
    where
        B: ContextParallelBackend,
    {
        self.fit_on::<B>(std::slice::from_ref(device), observer)
    }

    /// Trains with the ranks of a mesh on `devices`: rank `r` (in `pp x cp x dp` order) on
    /// `devices[r]`, or every rank on `devices[0]` when one device is given (one GPU, or the
    /// CPU, whose ranks are threads). The model is built, evaluated and returned on
    /// `devices[0]`, where single-device training also runs.
    ///
    /// # Errors
    ///
    /// As [`fit`](Self::fit); no devices, or a device count other than 1 or the mesh's rank
    /// count, is refused naming the field `devices`.
    pub fn fit_on<B>(
        &self,
        devices: &[B::Device],
        observer: &mut dyn TrainObserver,
    ) -> Result<TrainOutcome<B::InnerBackend>>
    where
        B: ContextParallelBackend,
    {
        if self.config.training.self_training_rounds > 0 {
            return self.fit_self_training::<B>(devices, observer);
        }
        self.fit_once::<B>(devices, observer)
    }

    /// One training run of [`fit_on`](Self::fit_on) (a round of self-training, when on).
    fn fit_once<B>(
        &self,
        devices: &[B::Device],
        observer: &mut dyn TrainObserver,
    ) -> Result<TrainOutcome<B::InnerBackend>>
    where
        B: ContextParallelBackend,
    {
        let Some(device) = devices.first() else {
            return Err(TrainError::InvalidConfig {
                field: "devices",
                reason: "no device given".into(),
            });
        };
        let layout = self.layout()?;
        B::seed(device, self.config.training.seed);
        let initial: GraphTransformer<B> = self.model_config().init(device);
        let checkpointer = self.config.training.checkpoint_dir.as_ref().map(Checkpointer::new);
        let start = self.resume::<B>(initial.valid(), checkpointer.as_ref(), device)?;
        let (mut state, mut best) = (start.state, start.best);
        let rows = layout.as_ref().map_or(RowLayout::SINGLE, |layout| RowLayout {
            cp: layout.cp,
            readers: layout.pp,
        });
        let attention = &self.config.attention;
        if attention.mode != AttentionMode::Full && layout.is_some() {
            return Err(TrainError::InvalidConfig {
                field: "attention.mode",
                reason: format!(
                    "{:?} attention runs on one device (pp = cp = dp = 1): the mesh's pipeline and context ring carry no edge lists",
                    attention.mode
                ),
            });
        }
        self.data.check_attention(attention)?;
        // sparse steps join a graph token where the model has one
        let graph_token = start.model.graph_token.is_some();
        let mut engine = self.start_engine(layout, start.model, start.record, devices)?;
        let plan = self.epoch_plan(rows);
        let evaluation = self.evaluation_batches();
        // on resume, reformation's β continues from the checkpoint's tuner
        let mut schedule = AttentionSchedule::new(attention.clone(), self.config.training.seed)
            .with_tuner(state.beta_tuner.clone())
            .with_graph_token(graph_token);

        // the snapshot ensemble of the best epochs' predictions, when on
        let ensemble_epochs = self.config.training.ensemble_epochs;
        let mut ensemble = (ensemble_epochs > 1).then(|| SnapshotEnsemble::new(ensemble_epochs));
        let mut step_seconds = Vec::new();
        let stopped = loop {
            if let Some(reason) = self.stop_reason(&state) {
                break reason;
            }
            let started = Instant::now();
            let mut trained = self.train_epoch(engine.as_mut(), &plan, &mut state, device, &schedule, observer)?;
            step_seconds.append(&mut trained.step_seconds);
            let current = engine.model()?;
            let (accuracy, probabilities) =
                self.evaluate_with(&current, &evaluation, device, &schedule.evaluation(), ensemble.is_some())?;
            let epoch = state.epoch + 1;
            observer.attention_steps(epoch, &trained.full_steps);
            if let Some(beta) = schedule.epoch_finished(epoch, trained.loss, (self.epoch_seconds)(epoch, started)) {
                log::info!("epoch {epoch}: reformation's β is {beta} for the next epoch");
                observer.reform_beta(epoch, beta);
            }
            state.beta_tuner = schedule.tuner().clone();
            let metrics = EpochMetrics {
                epoch,
                loss: trained.loss,
                train_accuracy: accuracy.train,
                valid_accuracy: accuracy.valid,
                valid_loss: accuracy.valid_loss,
                test_accuracy: accuracy.test,
                seconds: started.elapsed().as_secs_f64(),
                learning_rate: trained.learning_rate,
            };
            if let (Some(ensemble), Some(probabilities)) = (ensemble.as_mut(), probabilities) {
                ensemble.offer(epoch, accuracy.valid, probabilities);
            }
            let improved = state.record_epoch(metrics.clone());
            if improved {
                best = current.clone();
            }
            observer.epoch_finished(&metrics, improved);
            if let Some(checkpointer) = checkpointer.as_ref().filter(|_| self.is_lead()) {
                checkpointer.save::<B, _, _>(&current, &best, engine.optimizer_record()?, &state)?;
            }
            if observer.should_stop(epoch) {
                return Err(TrainError::Interrupted { epoch });
            }
        };
        let mut report = self.report(state, best.num_params(), &engine.rank_figures(), step_seconds, stopped);
        if let Some(scored) = ensemble.and_then(|ensemble| ensemble.report(&self.data)) {
            log::info!(
                "snapshot ensemble of epochs {:?}: valid {:.4}, test {:.4} (best epoch alone: {:.4}, {:.4})",
                scored.epochs,
                scored.valid_accuracy,
                scored.test_accuracy,
                report.best_valid_accuracy,
                report.test_accuracy
            );
            report.best_valid_accuracy = scored.valid_accuracy;
            report.test_accuracy = scored.test_accuracy;
            report.ensemble = Some(scored);
        }
        Ok(TrainOutcome { model: best, report })
    }

    /// The engine of the steps: the mesh of `layout` on `devices` (checked: one device, or one
    /// per rank), or `devices[0]` alone; it starts from `model` and, on resume, `record`.
    fn start_engine<B: ContextParallelBackend>(
        &self,
        layout: Option<ParallelConfig>,
        model: GraphTransformer<B::InnerBackend>,
        record: Option<OptimizerRecord<B>>,
        devices: &[B::Device],
    ) -> Result<Box<dyn StepEngine<B>>> {
        let setup = EngineSetup {
            optimizer: AdamWConfig::new().with_weight_decay(self.config.optimizer.weight_decay as f32),
            record,
            data: self.data.clone(),
            structure_dropout: self.config.data.structure_dropout,
            label_smoothing: self.config.training.label_smoothing,
            l2: L2Penalty::from_config(&self.config.optimizer),
            propagation: self.propagation.clone(),
            input_propagation: self.input_propagation.clone(),
            consistency: ConsistencyRegularization::from_config(&self.config, self.run_context()),
            label_input: LabelInput::from_config(&self.config),
            device: devices[0].clone(),
            rank_devices: devices.to_vec(),
            nodes: self.nodes.clone(),
            timeout: Duration::from_secs(600),
        };
        let Some(layout) = layout else {
            return Ok(Box::new(SingleDeviceEngine::new(model, setup)));
        };
        let world = layout.world_size();
        if devices.len() != 1 && devices.len() != world {
            return Err(TrainError::InvalidConfig {
                field: "devices",
                reason: format!(
                    "{} devices for a mesh of {world} ranks: give 1 (shared by every rank) or {world}",
                    devices.len()
                ),
            });
        }
        log::info!(
            "training on a mesh: pp={} cp={} dp={} micro_batches={} stage_layers={:?}",
            layout.pp,
            layout.cp,
            layout.dp,
            layout.micro_batches,
            layout.stage_layers
        );
        Ok(Box::new(MeshEngine::start(layout, model, setup, self.batch_size())?))
    }
}

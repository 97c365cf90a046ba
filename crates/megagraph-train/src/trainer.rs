use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module};
use burn::optim::AdamWConfig;
use burn::tensor::backend::Backend;
use megagraph_models::{GraphAttentionBackend, GraphTransformer, GraphTransformerConfig};
use megagraph_parallel::{ContextParallelBackend, NodeConfig, OptimizerRecord, ParallelConfig};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::{Checkpointer, TrainState};
use crate::config::{MeshConfig, TrainConfig};
use crate::data::{NodeBatch, SequenceDataset, SplitRole};
use crate::engine::{EngineSetup, MeshEngine, SingleDeviceEngine, StepEngine};
use crate::error::{Result, TrainError};
use crate::mesh_plan::MeshPlan;
use crate::metrics::{EpochMetrics, TrainReport, peak_rss_bytes};
use crate::parallel::{StepShape, resolve_layout};
use crate::prefetch::RowLayout;
use crate::schedule::WarmupCosine;

/// Receives progress while a [`NodeClassificationTrainer`] runs (progress bars, logs).
pub trait TrainObserver {
    /// An epoch starts; it will take `steps` optimizer steps.
    fn epoch_started(&mut self, _epoch: usize, _epochs: usize, _steps: usize) {}
    /// An optimizer step finished with `loss`.
    fn step_finished(&mut self, _loss: f64) {}
    /// An epoch finished.
    fn epoch_finished(&mut self, _metrics: &EpochMetrics, _improved: bool) {}
    /// Asked after each epoch (and its checkpoint): `true` interrupts training with
    /// [`TrainError::Interrupted`]; a later run can `--resume`.
    fn should_stop(&mut self, _epoch: usize) -> bool {
        false
    }
}

/// A [`TrainObserver`] that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl TrainObserver for Quiet {}

/// The outcome of training: the best-validation model and the report.
pub struct TrainOutcome<B: Backend> {
    /// The model with the best validation accuracy.
    pub model: GraphTransformer<B>,
    /// Metrics of the run.
    pub report: TrainReport,
}

/// Node-classification training of a [`GraphTransformer`] on a [`SequenceDataset`]: AdamW with
/// warm-up and cosine decay, early stopping on validation accuracy, the best-validation model
/// kept, checkpoints after every epoch.
///
/// Steps run on one device, or on the `pp x cp x dp` mesh of the config's `[mesh]` section
/// (worker threads through [`megagraph_parallel::ParallelTrainer`]). Either way a step takes the
/// same sequences, so with dropout 0 the losses agree; checkpoints hold the whole model and its
/// optimizer state, so a run may resume on another mesh.
pub struct NodeClassificationTrainer<'a> {
    config: &'a TrainConfig,
    data: Arc<SequenceDataset>,
    nodes: Option<NodeConfig>,
}

impl<'a> NodeClassificationTrainer<'a> {
    /// A trainer for `data` (a [`SequenceDataset`] or an `Arc` of one) configured by `config`.
    pub fn new(config: &'a TrainConfig, data: impl Into<Arc<SequenceDataset>>) -> Self {
        Self {
            config,
            data: data.into(),
            nodes: None,
        }
    }

    /// Makes this process one node of a multi-node run: every node runs the `[mesh]` layout
    /// (one device when the layout is `1 x 1 x 1`) and data parallelism spans the nodes. Every
    /// node must train with the same configuration and data; only node 0 writes checkpoints.
    pub fn with_nodes(mut self, nodes: NodeConfig) -> Self {
        self.nodes = Some(nodes).filter(NodeConfig::is_multi_node);
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

    /// The model configuration this trainer builds for its dataset.
    pub fn model_config(&self) -> GraphTransformerConfig {
        let d = &self.data.dataset;
        self.config.model_config(
            d.features.as_ref().map(|f| f.dim),
            d.graph.num_nodes(),
            d.num_classes,
        )
    }

    /// The mesh layout the `[mesh]` section asks for, checked against the model and the data;
    /// `None` for single-device training.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming the field when the layout cannot run, or a plan
    /// error.
    pub fn layout(&self) -> Result<Option<ParallelConfig>> {
        if !self.config.mesh.is_parallel() && self.nodes.is_none() {
            return Ok(None);
        }
        let steps = StepShape {
            seq_len: self.data.seq_len,
            sequences_per_step: self.batch_size(),
            num_sequences: self.data.num_sequences(),
            nodes: self.nodes.as_ref().map_or(1, |nodes| nodes.num_nodes),
            // the planner's memory model counts the sparse index as it will be built
            near_pairs_per_row: matches!(self.config.mesh.plan, Some(MeshPlan::Auto)).then(|| self.data.near_pairs_per_row()),
        };
        resolve_layout(&self.config.mesh, &self.model_config(), steps).map(Some)
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
        let Some(device) = devices.first() else {
            return Err(TrainError::InvalidConfig {
                field: "devices",
                reason: "no device given".into(),
            });
        };
        let config = self.config;
        let training = &config.training;
        let seed = training.seed;
        let layout = self.layout()?;
        if let Some(layout) = &layout {
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
        }
        B::seed(device, seed);
        let initial: GraphTransformer<B> = self.model_config().init(device);
        let mut model = initial.valid();
        let mut best = model.clone();
        let optimizer = AdamWConfig::new().with_weight_decay(config.optimizer.weight_decay as f32);

        let fingerprint = self.fingerprint();
        let checkpointer = training.checkpoint_dir.as_ref().map(Checkpointer::new);
        let writes_checkpoints = self.is_lead();
        let mut state = TrainState {
            epoch: 0,
            step: 0,
            best_epoch: 0,
            best_valid_accuracy: f64::NEG_INFINITY,
            epochs_without_improvement: 0,
            train_seconds: 0.0,
            history: Vec::new(),
            config_fingerprint: fingerprint.clone(),
        };
        let mut record: Option<OptimizerRecord<B>> = None;
        if training.resume {
            let checkpointer = checkpointer.as_ref().ok_or(TrainError::InvalidConfig {
                field: "training.resume",
                reason: "needs training.checkpoint_dir".into(),
            })?;
            match checkpointer.latest_state()? {
                Some(saved) => {
                    if saved.config_fingerprint != fingerprint {
                        return Err(TrainError::Checkpoint {
                            path: checkpointer.dir().to_path_buf(),
                            message: "was written with a different configuration or dataset; \
                                      resume with the same options or use another --checkpoint-dir"
                                .into(),
                        });
                    }
                    let loaded;
                    (model, best, loaded) = checkpointer.load::<B, _, _>(model, best, device)?;
                    record = Some(loaded);
                    log::info!(
                        "resuming after epoch {} from {}",
                        saved.epoch,
                        checkpointer.dir().display()
                    );
                    state = saved;
                }
                None => log::warn!(
                    "no checkpoint in {}: starting from scratch",
                    checkpointer.dir().display()
                ),
            }
        }

        let num_sequences = self.data.num_sequences();
        let batch_size = self.batch_size();
        let setup = EngineSetup {
            optimizer,
            record,
            data: self.data.clone(),
            structure_dropout: config.data.structure_dropout,
            device: device.clone(),
            rank_devices: devices.to_vec(),
            nodes: self.nodes.clone(),
            timeout: Duration::from_secs(600),
        };
        // how a step reads the distance rows, so they can be built ahead
        let rows = layout.as_ref().map_or(RowLayout::SINGLE, |layout| RowLayout {
            cp: layout.cp,
            readers: layout.pp,
        });
        let mut engine: Box<dyn StepEngine<B>> = match layout {
            Some(layout) => {
                log::info!(
                    "training on a mesh: pp={} cp={} dp={} micro_batches={} stage_layers={:?}",
                    layout.pp,
                    layout.cp,
                    layout.dp,
                    layout.micro_batches,
                    layout.stage_layers
                );
                Box::new(MeshEngine::start(layout, model, setup, batch_size)?)
            }
            None => Box::new(SingleDeviceEngine::new(model, setup)),
        };

        let steps_per_epoch = num_sequences.div_ceil(batch_size);
        let schedule = WarmupCosine {
            peak: config.optimizer.lr,
            warmup_steps: config.optimizer.warmup_epochs * steps_per_epoch,
            total_steps: training.epochs * steps_per_epoch,
            min_ratio: config.optimizer.min_lr_ratio,
        };
        let eval_batches: Vec<Vec<usize>> = (0..num_sequences)
            .collect::<Vec<_>>()
            .chunks(batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        let mut stopped = format!("reached {} epochs", training.epochs);
        let step_limit_reached = |step: usize| training.max_steps.is_some_and(|max| step >= max);

        while state.epoch < training.epochs {
            if step_limit_reached(state.step) {
                stopped = format!("reached {} steps (max_steps)", state.step);
                break;
            }
            if training.patience > 0 && state.epochs_without_improvement >= training.patience {
                stopped = format!(
                    "early stop: no better validation accuracy for {} epochs",
                    training.patience
                );
                break;
            }
            let epoch = state.epoch + 1;
            let started = Instant::now();
            // Dropout and order depend only on (seed, epoch), so a resumed run repeats exactly.
            B::seed(
                device,
                seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64),
            );
            let mut order: Vec<usize> = (0..num_sequences).collect();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(
                seed ^ (epoch as u64).rotate_left(32),
            ));
            let steps_this_epoch = training
                .max_steps
                .map_or(steps_per_epoch, |max| steps_per_epoch.min(max - state.step));
            observer.epoch_started(epoch, training.epochs, steps_this_epoch);

            let (mut loss_sum, mut loss_steps, mut lr) = (0.0, 0, schedule.at(state.step));
            let batches: Vec<&[usize]> = order.chunks(batch_size).collect();
            for (i, indices) in batches.iter().copied().enumerate() {
                if step_limit_reached(state.step) {
                    break;
                }
                let dropout_seed = seed ^ ((epoch as u64) << 40) ^ state.step as u64;
                self.prefetch(&batches, i, rows);
                let step_lr = schedule.at(state.step);
                let Some(loss) = engine.step(indices, step_lr, dropout_seed)? else {
                    continue;
                };
                lr = step_lr;
                state.step += 1;
                loss_sum += loss;
                loss_steps += 1;
                observer.step_finished(loss);
            }

            let current = engine.model()?;
            let accuracy = self.evaluate(&current, &eval_batches, device);
            let improved = accuracy.valid > state.best_valid_accuracy;
            if improved {
                state.best_valid_accuracy = accuracy.valid;
                state.best_epoch = epoch;
                state.epochs_without_improvement = 0;
                best = current.clone();
            } else {
                state.epochs_without_improvement += 1;
            }
            let metrics = EpochMetrics {
                epoch,
                loss: if loss_steps > 0 {
                    loss_sum / loss_steps as f64
                } else {
                    f64::NAN
                },
                train_accuracy: accuracy.train,
                valid_accuracy: accuracy.valid,
                test_accuracy: accuracy.test,
                seconds: started.elapsed().as_secs_f64(),
                learning_rate: lr,
            };
            state.train_seconds += metrics.seconds;
            state.epoch = epoch;
            state.history.push(metrics.clone());
            observer.epoch_finished(&metrics, improved);
            if let Some(checkpointer) = checkpointer.as_ref().filter(|_| writes_checkpoints) {
                checkpointer.save::<B, _, _>(
                    &current,
                    &best,
                    engine.optimizer_record()?,
                    &state,
                )?;
            }
            if observer.should_stop(epoch) {
                return Err(TrainError::Interrupted { epoch });
            }
        }

        let figures = engine.rank_figures();
        let best_test = state
            .history
            .iter()
            .find(|m| m.epoch == state.best_epoch)
            .map_or(f64::NAN, |m| m.test_accuracy);
        let dataset = &self.data.dataset;
        let report = TrainReport {
            dataset: dataset.name.clone(),
            nodes: dataset.graph.num_nodes(),
            edges: dataset.graph.num_edges(),
            params: best.num_params(),
            sequences: num_sequences,
            seq_len: self.data.seq_len,
            epochs_run: state.epoch,
            steps: state.step,
            best_epoch: state.best_epoch,
            best_valid_accuracy: state.best_valid_accuracy,
            test_accuracy: best_test,
            train_seconds: state.train_seconds,
            seconds_per_epoch: state.train_seconds / state.epoch.max(1) as f64,
            peak_rss_bytes: peak_rss_bytes(),
            index_bytes_per_rank: figures.iter().map(|f| f.index_bytes).collect(),
            dense_index_bytes_per_rank: figures.iter().map(|f| f.dense_index_bytes).collect(),
            rank_peak_bytes: figures.iter().map(|f| f.peak_bytes).collect(),
            partition_seconds: self.data.partition_seconds,
            index_seconds: self.data.index_seconds(),
            stopped,
            history: state.history,
        };
        Ok(TrainOutcome {
            model: best,
            report,
        })
    }

    /// Asks the dataset to build the distance rows of the `data.prefetch_batches` batches after
    /// `batches[current]` (none on a multi-node run, whose other nodes read most of them).
    fn prefetch(&self, batches: &[&[usize]], current: usize, rows: RowLayout) {
        let ahead = self.config.data.prefetch_batches.unwrap_or(0);
        if ahead == 0 || self.nodes.is_some() {
            return;
        }
        let upcoming = &batches[(current + 1).min(batches.len())..(current + 1 + ahead).min(batches.len())];
        self.data.prefetch(upcoming, rows);
    }

    /// Accuracy of `model` on the train, valid and test nodes.
    pub fn evaluate<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
    ) -> SplitAccuracy {
        let mut correct = [0usize; 3];
        let mut total = [0usize; 3];
        let slices: Vec<&[usize]> = batches.iter().map(Vec::as_slice).collect();
        for (i, indices) in slices.iter().enumerate() {
            self.prefetch(&slices, i, RowLayout::SINGLE);
            let batch: NodeBatch<B> = self.data.batch(indices, device);
            let predictions = model.forward(batch.graph).argmax(2).into_data();
            let predictions = predictions.iter::<i64>();
            for (node, predicted) in batch.nodes.iter().zip(predictions) {
                let Some(node) = *node else { continue };
                let label = self.data.dataset.labels[node as usize];
                let slot = match self.data.role(node) {
                    SplitRole::Train => 0,
                    SplitRole::Valid => 1,
                    SplitRole::Test => 2,
                    SplitRole::None => continue,
                };
                if label >= 0 {
                    total[slot] += 1;
                    correct[slot] += usize::from(predicted == label);
                }
            }
        }
        let ratio = |i: usize| {
            if total[i] == 0 {
                0.0
            } else {
                correct[i] as f64 / total[i] as f64
            }
        };
        SplitAccuracy {
            train: ratio(0),
            valid: ratio(1),
            test: ratio(2),
        }
    }
}

/// Accuracy on each split.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitAccuracy {
    /// On training nodes.
    pub train: f64,
    /// On validation nodes.
    pub valid: f64,
    /// On test nodes.
    pub test: f64,
}

//! [`TemporalTrainer`]: link-prediction training of a temporal GNN as TGL does it.
//!
//! Batches of chronological events, BCE on each positive and one sampled negative, Adam. The
//! memory is deferred: a batch reads the memory and mails earlier batches wrote; after the
//! optimizer step, the batch writes the memory and mail of each node's last event in it. The
//! memory is reset at every epoch's start and carries from training into validation and test.
//! The parameters and memory of the epoch with the best validation AP are tested. A batch's
//! forward pass (with intra-batch memory refinement) is in `forward.rs`, its training step in
//! `step.rs`, the multi-worker epoch in `workers/`.

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;
use megagraph_train::Checkpointer;
use serde::{Deserialize, Serialize};
use std::time::Instant;

use crate::batches::{Phase, batches};
use crate::config::TemporalTrainConfig;
use crate::dataset::TemporalDataset;
use crate::error::{Result, TemporalTrainError};
use crate::evaluate::evaluate;
use crate::observer::TemporalObserver;
use crate::report::{TemporalEpoch, TemporalReport};
use crate::setup::Setup;
use crate::state::{NodeState, NodeStateData};
use crate::step::train_batch;

/// Trains one temporal model on one dataset on one device.
#[derive(Debug)]
pub struct TemporalTrainer<'a> {
    config: &'a TemporalTrainConfig,
    data: &'a TemporalDataset,
    resume: bool,
    /// See [`Setup::write_back_delay`].
    write_back_delay: std::time::Duration,
}

/// Progress saved with every checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunState {
    epoch: usize,
    best_epoch: usize,
    best_valid_ap: Option<f64>,
    epochs_without_improvement: usize,
    train_seconds: f64,
    train_events: usize,
    history: Vec<TemporalEpoch>,
    fingerprint: String,
    /// Bytes of node memory the workers synchronized, over all epochs.
    #[serde(default)]
    sync_bytes: usize,
    /// Training events per worker in the last epoch.
    #[serde(default)]
    events_per_worker: Vec<usize>,
    /// Seconds of training steps on the critical path, and the number of steps.
    #[serde(default)]
    critical_seconds: f64,
    #[serde(default)]
    critical_steps: usize,
}

const MEMORY_FILE: &str = "best_memory.bin";

impl<'a> TemporalTrainer<'a> {
    /// A trainer of `config` on `data`.
    pub fn new(config: &'a TemporalTrainConfig, data: &'a TemporalDataset) -> Self {
        Self {
            config,
            data,
            resume: false,
            write_back_delay: std::time::Duration::ZERO,
        }
    }

    /// Continue from the latest checkpoint in `config.checkpoint_dir` (a directory without one
    /// starts afresh). The run then equals the uninterrupted one exactly.
    pub fn with_resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// Delays every deferred memory write-back by `delay` (a test of their ordering).
    #[cfg(test)]
    pub(crate) fn with_write_back_delay(mut self, delay: std::time::Duration) -> Self {
        self.write_back_delay = delay;
        self
    }

    /// Trains, then tests the best epoch's parameters and memory.
    ///
    /// # Errors
    ///
    /// Invalid configuration for these data, unreadable or foreign checkpoints, and
    /// [`TemporalTrainError::Interrupted`] when `observer` stops the run.
    pub fn fit<B: AutodiffBackend>(
        &self,
        device: &B::Device,
        observer: &mut dyn TemporalObserver,
    ) -> Result<TemporalReport> {
        let mut setup = Setup::new(self.config, self.data)?;
        setup.write_back_delay = self.write_back_delay;
        let config = self.config;
        B::seed(device, config.seed);
        // Burn initializes parameters lazily, and a clone of an uninitialized parameter draws
        // its own values: initialize once here, so the model trained, the epoch-0 best and
        // every worker's replica start from the same parameters.
        let initial: TemporalModel<B> = megagraph_parallel::fresh_leaves(setup.model.init(device));
        let mut optimizer = AdamConfig::new().init::<B, TemporalModel<B>>();
        let checkpointer = config.checkpoint_dir.as_ref().map(Checkpointer::new);
        let mut run = RunState {
            epoch: 0,
            best_epoch: 0,
            best_valid_ap: None,
            epochs_without_improvement: 0,
            train_seconds: 0.0,
            train_events: 0,
            history: Vec::new(),
            fingerprint: self.fingerprint(),
            sync_bytes: 0,
            events_per_worker: Vec::new(),
            critical_seconds: 0.0,
            critical_steps: 0,
        };
        let mut model = initial.clone();
        let mut best = initial.valid();
        let mut best_state: Option<NodeStateData> = None;
        if let Some(checkpointer) = checkpointer.as_ref().filter(|_| self.resume) {
            if let Some(saved) = checkpointer.latest_state_as::<RunState>()? {
                if saved.fingerprint != run.fingerprint {
                    return Err(TemporalTrainError::Checkpoint {
                        path: checkpointer.dir().to_path_buf(),
                        message: "was written by another configuration or dataset".into(),
                    });
                }
                let (current, saved_best, record) =
                    checkpointer.load::<B, _, _>(model.valid(), best.clone(), device)?;
                model = megagraph_parallel::trainable(TemporalModel::<B>::from_inner(current));
                best = saved_best;
                optimizer = optimizer.load_record(record);
                if setup.model.memory_update.is_some() && saved.best_epoch > 0 {
                    let dir = checkpointer.latest_dir()?.unwrap_or_else(|| checkpointer.dir().to_path_buf());
                    best_state = Some(NodeStateData::read(&dir.join(MEMORY_FILE))?);
                }
                log::info!("resuming after epoch {} from {}", saved.epoch, checkpointer.dir().display());
                run = saved;
            } else {
                log::warn!("no checkpoint in {}: starting afresh", checkpointer.dir().display());
            }
        }
        let stream = &self.data.stream;
        while run.epoch < config.epochs && (run.epoch == 0 || run.epochs_without_improvement < config.patience) {
            let epoch = run.epoch + 1;
            // Dropout masks are keyed by batch (`Phase::dropout_scope`); whatever else draws from
            // the backend's generator is reseeded per epoch, so a resumed epoch draws what the
            // uninterrupted one drew.
            B::seed(device, config.seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let started = Instant::now();
            let (trained, loss, state) = match config.scheme {
                None => {
                    let mut state = NodeState::<B>::for_model(&setup.model, stream.num_nodes(), device);
                    let (trained, loss) =
                        self.train_epoch(&setup, epoch, model, &mut optimizer, state.as_mut(), device, observer)?;
                    let steps = self.data.split.train.len().div_ceil(config.batch_size);
                    run.critical_seconds += started.elapsed().as_secs_f64();
                    run.critical_steps += steps;
                    run.events_per_worker = vec![self.data.split.train.len()];
                    (trained, loss, state)
                }
                Some(scheme) => {
                    let outcome = crate::workers::train_epoch(
                        &setup, scheme, config.workers, epoch, model, &mut optimizer, device, observer,
                    )?;
                    run.sync_bytes += outcome.counters.sync_bytes;
                    run.critical_seconds += outcome.counters.step_seconds;
                    run.critical_steps += outcome.counters.steps;
                    run.events_per_worker = outcome.counters.events_per_worker;
                    (outcome.model, outcome.loss, outcome.state)
                }
            };
            model = trained;
            let seconds = started.elapsed().as_secs_f64();
            let current = model.valid();
            let mut valid_state = state.map(|s| s.to_backend::<B::InnerBackend>(device)).transpose()?;
            let valid = evaluate(&setup, &current, valid_state.as_mut(), Phase::Valid, 1, device, observer)?;
            let valid_ap = valid.scores.average_precision().unwrap_or(0.0);
            run.epoch = epoch;
            run.train_seconds += seconds;
            run.train_events += self.data.split.train.len();
            run.history.push(TemporalEpoch {
                epoch,
                loss,
                valid_ap,
                valid_auc: valid.scores.roc_auc().unwrap_or(0.5),
                seconds,
            });
            if run.best_valid_ap.is_none_or(|best_ap| valid_ap > best_ap) {
                run.best_valid_ap = Some(valid_ap);
                run.best_epoch = epoch;
                run.epochs_without_improvement = 0;
                best = current.clone();
                best_state = valid_state.as_ref().map(NodeState::to_data).transpose()?;
            } else {
                run.epochs_without_improvement += 1;
            }
            if let Some(checkpointer) = &checkpointer {
                checkpointer.save_with::<B, _, _, _>(epoch, &current, &best, optimizer.to_record(), &run, |dir| {
                    match &best_state {
                        Some(data) => data.write(&dir.join(MEMORY_FILE)).map_err(|err| megagraph_train::TrainError::Checkpoint {
                            path: dir.join(MEMORY_FILE),
                            message: err.to_string(),
                        }),
                        None => Ok(()),
                    }
                })?;
            }
            if let Some(last) = run.history.last() {
                observer.epoch_finished(last);
            }
        }
        self.test::<B>(&setup, &best, best_state.as_ref(), &run, device, observer)
    }

    /// What a checkpoint must match to be resumed: the configuration (less where checkpoints
    /// go and how many epochs run) and the data.
    fn fingerprint(&self) -> String {
        let config = TemporalTrainConfig {
            checkpoint_dir: None,
            epochs: 0,
            // exact: a run resumes with or without it
            critical_path: None,
            ..self.config.clone()
        };
        let stream = &self.data.stream;
        format!(
            "{} | {} nodes, {} events, last time {:?} | {}",
            self.data.name,
            stream.num_nodes(),
            stream.len(),
            stream.time().last(),
            serde_json::to_string(&config).unwrap_or_default()
        )
    }

    /// One training epoch: returns the model and the mean loss.
    #[allow(clippy::too_many_arguments)]
    fn train_epoch<B: AutodiffBackend, O: Optimizer<TemporalModel<B>, B>>(
        &self,
        setup: &Setup<'_>,
        epoch: usize,
        mut model: TemporalModel<B>,
        optimizer: &mut O,
        mut state: Option<&mut NodeState<B>>,
        device: &B::Device,
        observer: &mut dyn TemporalObserver,
    ) -> Result<(TemporalModel<B>, f64)> {
        let batches = batches(self.data.split.train.clone(), self.config.batch_size);
        observer.epoch_started(epoch, batches.len());
        let tensors = setup.tensors::<B>(device);
        let phase = Phase::Train(epoch);
        let mut loss_sum = 0.0;
        for (index, events) in batches.iter().enumerate() {
            let (trained, loss) =
                train_batch(setup, model, optimizer, state.as_deref_mut(), phase, index, events.clone(), &tensors)?;
            model = trained;
            let Some(value) = loss else { continue };
            loss_sum += value;
            observer.batch_finished(value);
            if observer.should_stop() {
                return Err(TemporalTrainError::Interrupted { epoch: epoch - 1 });
            }
        }
        Ok((model, loss_sum / batches.len().max(1) as f64))
    }

    /// Tests `best` from the memory it left after its validation.
    fn test<B: AutodiffBackend>(
        &self,
        setup: &Setup<'_>,
        best: &TemporalModel<B::InnerBackend>,
        best_state: Option<&NodeStateData>,
        run: &RunState,
        device: &B::Device,
        observer: &mut dyn TemporalObserver,
    ) -> Result<TemporalReport> {
        let mut state = match best_state {
            Some(data) => Some(NodeState::<B::InnerBackend>::from_data(data, device)?),
            None => NodeState::for_model(&setup.model, self.data.stream.num_nodes(), device),
        };
        let negatives = self.config.mrr_negatives.max(1);
        let test = evaluate(setup, best, state.as_mut(), Phase::Test, negatives, device, observer)?;
        let stream = &self.data.stream;
        Ok(TemporalReport {
            dataset: self.data.name.clone(),
            model: self.config.model.name().to_string(),
            nodes: stream.num_nodes(),
            events: stream.len(),
            test_ap: test.scores.average_precision().unwrap_or(0.0),
            test_ap_batch_mean: test.scores.batch_mean_average_precision().unwrap_or(0.0),
            test_auc: test.scores.roc_auc().unwrap_or(0.5),
            test_mrr: test.mrr.filter(|_| self.config.mrr_negatives > 0),
            mrr_negatives: self.config.mrr_negatives,
            best_valid_ap: run.best_valid_ap.unwrap_or(0.0),
            best_epoch: run.best_epoch,
            epochs_run: run.epoch,
            events_per_second: if run.train_seconds > 0.0 {
                run.train_events as f64 / run.train_seconds
            } else {
                0.0
            },
            train_seconds: run.train_seconds,
            history: run.history.clone(),
            scheme: self.config.scheme,
            workers: self.config.workers,
            sync_bytes_per_epoch: run.sync_bytes as f64 / run.epoch.max(1) as f64,
            events_per_worker: run.events_per_worker.clone(),
            critical_path_seconds_per_batch: run.critical_seconds / run.critical_steps.max(1) as f64,
            critical_path: self.config.defers_write_back(),
        })
    }
}

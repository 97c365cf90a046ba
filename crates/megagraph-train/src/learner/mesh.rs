//! The parallel placement of [`MegaGraphTrainer`](super::MegaGraphTrainer): training epochs on
//! a `pp x cp x dp` mesh (the crate's one [`MeshEngine`], as the
//! [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) uses it) fed by the training
//! loader's sequence indices, and the ranks' optimizer state saved after every epoch and read
//! back on resume.

use std::path::{Path, PathBuf};

use burn::data::dataloader::Progress;
use burn::module::{AutodiffModule, Module};
use burn::optim::AdamWConfig;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::{Int, Tensor};
use burn_train::{
    ClassificationOutput, EventProcessorTraining, Interrupter, Learner, LearnerEvent, LearningComponentsTypes,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingItem,
};
use megagraph_models::GraphAttentionBackend;
use megagraph_parallel::{ContextParallelBackend, OptimizerRecord};

use super::{NodeClassifier, ParallelPlacement, SequenceBatch};
use crate::engine::{EngineSetup, L2Penalty, MeshEngine, StepEngine};

/// The epochs of a parallel placement: its [`MeshEngine`], started at the first training batch
/// (it needs the batch's dataset) and kept across epochs.
pub(super) struct MeshEpochs<B: ContextParallelBackend> {
    placement: ParallelPlacement<B>,
    /// The optimizer every rank runs (the trainer's, which its learner holds too).
    optimizer: AdamWConfig,
    /// The first epoch this run trains (above 1 when it resumes).
    starting_epoch: usize,
    running: Option<MeshEngine<B>>,
}

/// The ranks' optimizer state after `epoch` in `dir` (the recorder keeps the `.mpk` extension).
fn optimizer_file(dir: &Path, epoch: usize) -> PathBuf {
    dir.join(format!("mesh-optimizer-{epoch}.mpk"))
}

type OptimizerRecorder = NamedMpkFileRecorder<FullPrecisionSettings>;

impl<B> MeshEpochs<B>
where
    B: ContextParallelBackend,
    B::InnerBackend: GraphAttentionBackend,
{
    pub(super) fn new(placement: ParallelPlacement<B>, optimizer: AdamWConfig, starting_epoch: usize) -> Self {
        Self {
            placement,
            optimizer,
            starting_epoch,
            running: None,
        }
    }

    /// Saves the ranks' optimizer state after `epoch` into the placement's
    /// `optimizer_checkpoints` directory (if any, and once the mesh runs): written under a
    /// temporary name and renamed into place, then the state of two epochs before is removed.
    ///
    /// # Panics
    ///
    /// When the state cannot be gathered or written.
    pub(super) fn save_optimizer(&mut self, epoch: usize) {
        let (Some(dir), Some(running)) = (&self.placement.optimizer_checkpoints, &mut self.running) else {
            return;
        };
        let record = running
            .optimizer_record()
            .unwrap_or_else(|error| panic!("cannot gather the optimizer state from the mesh: {error}"));
        let path = optimizer_file(dir, epoch);
        // the recorder sets the `.mpk` extension: the temporary name has it, and no other dot
        let temporary = dir.join(format!("mesh-optimizer-{epoch}-tmp.mpk"));
        std::fs::create_dir_all(dir).unwrap_or_else(|error| panic!("cannot create {}: {error}", dir.display()));
        Recorder::<B>::record(&OptimizerRecorder::new(), record, temporary.clone())
            .unwrap_or_else(|error| panic!("cannot write the mesh's optimizer state {}: {error}", path.display()));
        std::fs::rename(&temporary, &path)
            .unwrap_or_else(|error| panic!("cannot write the mesh's optimizer state {}: {error}", path.display()));
        log::info!("saved the mesh's optimizer state after epoch {epoch} to {}", path.display());
        if let Some(old) = epoch.checked_sub(2) {
            let old = optimizer_file(dir, old);
            if let Err(error) = std::fs::remove_file(&old)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("cannot remove {}: {error}", old.display());
            }
        }
    }

    /// The saved optimizer state of the epoch before this run's first, when it resumes and the
    /// placement saves the state.
    ///
    /// # Panics
    ///
    /// When the file exists but cannot be read.
    fn saved_optimizer(&self) -> Option<OptimizerRecord<B>> {
        let dir = self.placement.optimizer_checkpoints.as_ref()?;
        let epoch = self.starting_epoch.checked_sub(1).filter(|&epoch| epoch > 0)?;
        let file = optimizer_file(dir, epoch);
        if !file.is_file() {
            log::warn!(
                "resuming after epoch {epoch} without the mesh's optimizer state ({} is missing): \
                 the ranks' AdamW moments restart",
                file.display()
            );
            return None;
        }
        let device = &self.placement.devices[0];
        let record = Recorder::<B>::load(&OptimizerRecorder::new(), file.clone(), device)
            .unwrap_or_else(|error| panic!("cannot read the mesh's optimizer state {}: {error}", file.display()));
        log::info!("resuming the mesh's optimizer state from {}", file.display());
        Some(record)
    }

    /// Starts the ranks from the learner's current parameters (and, on resume, the saved
    /// optimizer state).
    ///
    /// # Panics
    ///
    /// When the mesh cannot start (a configuration that does not fit the model or the batch,
    /// a wrong device count) or the saved optimizer state cannot be read or loaded: a
    /// burn-train strategy has no error channel.
    fn start<LC>(&mut self, learner: &Learner<LC>, first: &SequenceBatch<B>) -> &mut MeshEngine<B>
    where
        LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>>,
    {
        let saved = self.running.is_none().then(|| self.saved_optimizer()).flatten();
        let running = self.running.take().unwrap_or_else(|| {
            let placement = &self.placement;
            let setup = EngineSetup {
                optimizer: self.optimizer.clone(),
                record: saved,
                data: first.data.clone(),
                structure_dropout: first.structure_dropout.map_or(0.0, |(p, _)| p),
                label_smoothing: learner.model().label_smoothing,
                l2: L2Penalty::default(),
                propagation: None,
                input_propagation: None,
                consistency: None,
                label_input: None,
                device: placement.devices[0].clone(),
                rank_devices: placement.devices.clone(),
                nodes: None,
                timeout: placement.timeout,
            };
            let model = learner.model().valid().into_inner();
            MeshEngine::start(placement.config.clone(), model, setup, first.sequences.len())
                .unwrap_or_else(|error| panic!("the parallel mesh {:?} cannot start: {error}", placement.config))
        });
        self.running.insert(running)
    }

    /// One training epoch on the mesh; afterwards the learner holds the mesh's parameters.
    ///
    /// # Panics
    ///
    /// When a rank fails (the error names the rank and the cause).
    pub(super) fn train_epoch<LC>(
        &mut self,
        learner: &mut Learner<LC>,
        loader: &TrainLoader<LC>,
        epochs: &Progress,
        processor: &mut SupervisedTrainingEventProcessor<LC>,
        interrupter: &Interrupter,
    ) where
        LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>>,
    {
        let epoch = epochs.items_processed;
        let needed = self.placement.config.dp * self.placement.config.micro_batches;
        let classes = learner.model().model.classifier.weight.dims()[1];
        log::info!("training epoch {epoch} on the mesh {:?}", self.placement.config);
        let mut iterator = loader.iter();
        let mut iteration = 0;
        while let Some(batch) = iterator.next() {
            if batch.sequences.len() < needed {
                log::warn!(
                    "skipping a batch of {} sequences: the mesh needs at least dp x micro_batches = {needed}",
                    batch.sequences.len()
                );
                continue;
            }
            iteration += 1;
            learner.lr_step();
            let lr = learner.lr_current();
            let progress = iterator.progress();
            let running = self.start(learner, &batch);
            let seed = batch.structure_dropout.map_or(0, |(_, seed)| seed);
            // a batch without training nodes changes nothing and reports a loss of 0
            let loss = running
                .step(&batch.sequences, lr, seed)
                .unwrap_or_else(|error| panic!("parallel training step failed: {error}"))
                .unwrap_or(0.0);
            let device = &batch.device;
            // The mesh reports the loss only: no logits come back from the last stage.
            let output = ClassificationOutput::new(
                Tensor::<B, 1>::from_floats([loss as f32], device),
                Tensor::<B, 2>::zeros([0, classes], device),
                Tensor::<B, 1, Int>::zeros([0], device),
            );
            let item = TrainingItem::new(output, progress, epochs.clone(), Some(iteration), Some(lr));
            processor.process_train(LearnerEvent::ProcessedItem(item));
            if interrupter.should_stop() {
                break;
            }
        }
        if let Some(running) = &mut self.running {
            let model = running
                .model()
                .unwrap_or_else(|error| panic!("cannot gather the parameters from the mesh: {error}"));
            let smoothing = learner.model().label_smoothing;
            let model = NodeClassifier::<B>::from_inner(NodeClassifier::new(model).with_label_smoothing(smoothing));
            learner.load_model(model.into_record());
        }
        processor.process_train(LearnerEvent::EndEpoch(epoch));
    }
}

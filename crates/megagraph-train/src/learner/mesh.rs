//! The parallel placement of [`MegaGraphTrainer`](super::MegaGraphTrainer): training epochs on
//! a `pp x cp x dp` mesh ([`ParallelTrainer`]) fed by the training loader's sequence indices.

use std::sync::Arc;

use burn::data::dataloader::Progress;
use burn::module::{AutodiffModule, Module};
use burn::tensor::{Int, Tensor};
use burn_train::{
    ClassificationOutput, EventProcessorTraining, Interrupter, Learner, LearnerEvent, LearningComponentsTypes,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingItem,
};
use megagraph_models::GraphAttentionBackend;
use megagraph_parallel::{ContextParallelBackend, ParallelTrainer, TrainerOptions};

use super::{NodeClassifier, ParallelPlacement, SequenceBatch};
use crate::parallel::DatasetSource;

/// A mesh started at the first training batch (it needs the batch's dataset) and kept across
/// epochs.
pub(super) struct Mesh<B: ContextParallelBackend> {
    placement: ParallelPlacement<B>,
    running: Option<Running<B>>,
}

struct Running<B: ContextParallelBackend> {
    trainer: ParallelTrainer<B>,
    source: Arc<DatasetSource>,
}

impl<B> Mesh<B>
where
    B: ContextParallelBackend,
    B::InnerBackend: GraphAttentionBackend,
{
    pub(super) fn new(placement: ParallelPlacement<B>) -> Self {
        Self {
            placement,
            running: None,
        }
    }

    /// Starts the ranks from the learner's current parameters.
    ///
    /// # Panics
    ///
    /// When the mesh cannot start (a configuration that does not fit the model or the batch,
    /// a wrong device count): a burn-train strategy has no error channel.
    fn start<LC>(&mut self, learner: &Learner<LC>, first: &SequenceBatch<B>) -> &mut Running<B>
    where
        LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>>,
    {
        let running = self.running.take().unwrap_or_else(|| {
            let placement = &self.placement;
            let probability = first.structure_dropout.map_or(0.0, |(p, _)| p);
            let source = Arc::new(DatasetSource::new(first.data.clone(), probability));
            let options = TrainerOptions::new(first.data.seq_len, first.sequences.len())
                .with_optimizer(placement.optimizer.clone())
                .with_timeout(placement.timeout);
            let model = learner.model().valid().into_inner();
            let trainer = ParallelTrainer::new(
                placement.config.clone(),
                model,
                source.clone(),
                options,
                placement.devices.clone(),
            )
            .unwrap_or_else(|error| panic!("the parallel mesh {:?} cannot start: {error}", placement.config));
            Running { trainer, source }
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
            if let Some((_, seed)) = batch.structure_dropout {
                running.source.set_step_seed(seed);
            }
            let step = running
                .trainer
                .step(&batch.sequences, lr)
                .unwrap_or_else(|error| panic!("parallel training step failed: {error}"));
            let device = &batch.device;
            // The mesh reports the loss only: no logits come back from the last stage.
            let output = ClassificationOutput::new(
                Tensor::<B, 1>::from_floats([step.loss as f32], device),
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
                .trainer
                .model()
                .unwrap_or_else(|error| panic!("cannot gather the parameters from the mesh: {error}"));
            let model = NodeClassifier::<B>::from_inner(NodeClassifier::new(model));
            learner.load_model(model.into_record());
        }
        processor.process_train(LearnerEvent::EndEpoch(epoch));
    }
}

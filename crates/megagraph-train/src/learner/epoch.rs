//! The epochs of [`MegaGraphTrainer`](super::MegaGraphTrainer) on one device: a training epoch
//! (forward, backward and optimizer step per batch, with gradient accumulation) and a
//! validation epoch, each reporting every batch to Burn's event processor.

use burn::data::dataloader::Progress;
use burn::module::AutodiffModule;
use burn::optim::GradientsAccumulator;
use burn::tensor::backend::AutodiffBackend;
use burn_train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent, LearningComponentsTypes,
    SupervisedTrainingEventProcessor, TrainLoader, TrainingItem, ValidLoader,
};
use megagraph_models::GraphAttentionBackend;

use super::NodeClassifier;
use crate::attention_schedule::AttentionSchedule;

/// What an epoch on one device reports to and reads besides its learner and loader: burn-train's
/// epoch progress, event processor and interrupter, and the steps' attention schedule (full
/// attention when `None`).
pub(super) struct EpochScope<'a, LC: LearningComponentsTypes> {
    /// The epoch counter (`items_processed` is the current epoch).
    pub epochs: &'a Progress,
    /// Where every batch is reported.
    pub processor: &'a mut SupervisedTrainingEventProcessor<LC>,
    /// Stops the epoch early when set.
    pub interrupter: &'a Interrupter,
    /// The attention of each step.
    pub attention: Option<&'a AttentionSchedule>,
}

/// Runs one training epoch of `learner` over `loader` on one device; each step runs the
/// attention `scope.attention` gives it.
pub(super) fn train_epoch<B, LC>(
    learner: &mut Learner<LC>,
    loader: &TrainLoader<LC>,
    grad_accumulation: Option<usize>,
    scope: EpochScope<'_, LC>,
) where
    B: AutodiffBackend + GraphAttentionBackend,
    B::InnerBackend: GraphAttentionBackend,
    LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>>,
{
    let epoch = scope.epochs.items_processed;
    log::info!("training epoch {epoch}");
    // the epoch's batches first (sequence indices: the tensors are built at each step), so
    // that an interleaved schedule knows the epoch's step count
    let mut iterator = loader.iter();
    let mut batches = Vec::new();
    while let Some(batch) = iterator.next() {
        batches.push((batch, iterator.progress()));
    }
    let full = scope.attention.map(|schedule| schedule.epoch_full_steps(epoch, batches.len()));
    let mut iteration = 0;
    let mut accumulator = GradientsAccumulator::new();
    let mut accumulated = 0;
    for (step, (mut batch, progress)) in batches.into_iter().enumerate() {
        if let (Some(schedule), Some(full)) = (scope.attention, &full) {
            batch.attention = schedule.step(full, step);
        }
        iteration += 1;
        learner.lr_step();
        let output = learner.train_step(batch);
        match grad_accumulation {
            Some(every) => {
                accumulator.accumulate(&learner.model(), output.grads);
                accumulated += 1;
                if accumulated >= every {
                    learner.optimizer_step(accumulator.grads());
                    accumulated = 0;
                }
            }
            None => learner.optimizer_step(output.grads),
        }
        let item = TrainingItem::new(output.item, progress, scope.epochs.clone(), Some(iteration), Some(learner.lr_current()));
        scope.processor.process_train(LearnerEvent::ProcessedItem(item));
        if scope.interrupter.should_stop() {
            break;
        }
    }
    scope.processor.process_train(LearnerEvent::EndEpoch(epoch));
}

/// Runs one validation epoch of `learner`'s current model over `loader` with the evaluation
/// attention of `scope.attention`.
pub(super) fn valid_epoch<B, LC>(learner: &Learner<LC>, loader: &ValidLoader<LC>, scope: EpochScope<'_, LC>)
where
    B: AutodiffBackend + GraphAttentionBackend,
    B::InnerBackend: GraphAttentionBackend,
    LC: LearningComponentsTypes<Backend = B, TrainingModel = NodeClassifier<B>, InferenceModel = NodeClassifier<B::InnerBackend>>,
{
    let epoch = scope.epochs.items_processed;
    log::info!("validation epoch {epoch}");
    let model = learner.model().valid();
    let mut iterator = loader.iter();
    let mut iteration = 0;
    while let Some(mut batch) = iterator.next() {
        if let Some(schedule) = scope.attention {
            batch.attention = schedule.evaluation();
        }
        iteration += 1;
        let progress = iterator.progress();
        let item = TrainingItem::new(model.step(batch), progress, scope.epochs.clone(), Some(iteration), None);
        scope.processor.process_valid(LearnerEvent::ProcessedItem(item));
        if scope.interrupter.should_stop() {
            break;
        }
    }
    scope.processor.process_valid(LearnerEvent::EndEpoch(epoch));
}

/// Waits until the event processor has handled every event sent so far, so that the metrics of
/// the epoch are in the event store before the checkpointer and early stopping read them.
///
/// Burn's processor runs on its own thread behind a channel of capacity 1: the second of two
/// no-op events (`Start` on the validation side does nothing) is accepted only once the worker
/// took the first, that is after it finished every earlier event. (Burn 0.21's default strategy
/// skips this and may read an epoch's metrics before they are logged.)
pub(super) fn drain<LC: LearningComponentsTypes>(processor: &mut SupervisedTrainingEventProcessor<LC>) {
    processor.process_valid(LearnerEvent::Start);
    processor.process_valid(LearnerEvent::Start);
}

//! Self-training around the training loop: rounds of training, each with the previous round's
//! confident predictions as extra labels (Lee 2013, "Pseudo-Label"; on graphs Li et al. 2018,
//! "Deeper Insights into Graph Convolutional Networks for Semi-Supervised Learning").

use megagraph_models::{GraphAttentionBackend, GraphTransformer};
use megagraph_parallel::ContextParallelBackend;

use super::NodeClassificationTrainer;
use crate::data::SplitRole;
use crate::attention_schedule::AttentionSchedule;
use crate::error::Result;
use crate::metrics::SelfTrainingRound;
use crate::observer::{TrainObserver, TrainOutcome};

impl NodeClassificationTrainer<'_> {
    /// [`fit_on`](Self::fit_on) with `[training] self_training_rounds` above 0: a first run,
    /// then per round a fresh model (the same seed) trained with the pseudo-labels of the
    /// previous round's best model ([`pseudo_labels`](Self::pseudo_labels)). Returns the round
    /// with the best validation accuracy (the earliest on a tie); its report lists every round.
    pub(super) fn fit_self_training<B>(
        &self,
        devices: &[B::Device],
        observer: &mut dyn TrainObserver,
    ) -> Result<TrainOutcome<B::InnerBackend>>
    where
        B: ContextParallelBackend,
    {
        let rounds = self.config.training.self_training_rounds;
        let mut kept = self.fit_once::<B>(devices, observer)?;
        // the first run refused an empty `devices`
        let Some(device) = devices.first() else { return Ok(kept) };
        let mut summaries = vec![summary(0, 0, &kept)];
        let mut kept_round = 0;
        let mut teacher = kept.model.clone();
        for round in 1..=rounds {
            let labels = self.pseudo_labels(&teacher, device)?;
            let count = labels.iter().filter(|&&label| label >= 0).count();
            log::info!("self-training round {round} of {rounds}: {count} pseudo-labels");
            self.data.set_pseudo_labels(Some(labels))?;
            let outcome = self.fit_once::<B>(devices, observer);
            // the dataset is left as it was given, whatever the round's result
            self.data.set_pseudo_labels(None)?;
            let outcome = outcome?;
            summaries.push(summary(round, count, &outcome));
            teacher = outcome.model.clone();
            if outcome.report.best_valid_accuracy > kept.report.best_valid_accuracy {
                kept = outcome;
                kept_round = round;
            }
        }
        summaries[kept_round].kept = true;
        log::info!(
            "self-training kept round {kept_round} (best valid accuracy {:.4})",
            kept.report.best_valid_accuracy
        );
        kept.report.self_training = summaries;
        Ok(kept)
    }

    /// Self-training's pseudo-labels from `model` (evaluated as after an epoch, with the run's
    /// attention mode; a tuned reformation threshold at its initial value): per node its
    /// predicted class where the node is outside the training and validation splits and the
    /// class's probability is at least `[training] self_training_threshold`, else -1. No
    /// label decides a pseudo-label.
    pub(super) fn pseudo_labels<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        device: &B::Device,
    ) -> Result<Vec<i64>> {
        let threshold = self.config.training.self_training_threshold;
        // the attention evaluation runs with: full, or the sparse attention a sparse run trains
        let attention = AttentionSchedule::new(self.config.attention.clone(), self.config.training.seed)
            .with_graph_token(model.graph_token.is_some())
            .evaluation();
        let (predictions, _) = self.predict_with(model, &self.evaluation_batches(), device, &attention, false)?;
        let labels = (0..self.data.dataset.num_nodes())
            .map(|node| {
                let candidate = matches!(self.data.role(node as u32), SplitRole::Test | SplitRole::None);
                match predictions.class[node] {
                    Some(class) if candidate && predictions.confidence[node] >= threshold => class,
                    _ => -1,
                }
            })
            .collect();
        Ok(labels)
    }
}

/// The summary of round `round`, which trained with `pseudo_labels` pseudo-labels.
fn summary<B: burn::tensor::backend::Backend>(round: usize, pseudo_labels: usize, outcome: &TrainOutcome<B>) -> SelfTrainingRound {
    SelfTrainingRound {
        round,
        pseudo_labels,
        best_valid_accuracy: outcome.report.best_valid_accuracy,
        test_accuracy: outcome.report.test_accuracy,
        epochs_run: outcome.report.epochs_run,
        kept: false,
    }
}

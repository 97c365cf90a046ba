//! The evaluation step of the training loop: accuracy on the train, valid and test nodes.

use megagraph_models::{GraphAttentionBackend, GraphTransformer};

use super::NodeClassificationTrainer;
use crate::data::{NodeBatch, SplitRole};
use crate::engine::StepAttention;
use crate::error::Result;
use crate::prefetch::RowLayout;
use crate::step_attention::step_logits;

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

impl NodeClassificationTrainer<'_> {
    /// Every sequence in order, cut into batches of the run's batch size (what
    /// [`evaluate`](Self::evaluate) runs after each epoch).
    pub(super) fn evaluation_batches(&self) -> Vec<Vec<usize>> {
        (0..self.data.num_sequences())
            .collect::<Vec<_>>()
            .chunks(self.batch_size())
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// Accuracy of `model` (with full attention) on the train, valid and test nodes.
    pub fn evaluate<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
    ) -> SplitAccuracy {
        self.evaluate_with(model, batches, device, &StepAttention::Full)
            .unwrap_or_else(|_| unreachable!("full attention builds no edges and cannot fail"))
    }

    /// [`evaluate`](Self::evaluate) with the attention core `attention`.
    pub(super) fn evaluate_with<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
        attention: &StepAttention,
    ) -> Result<SplitAccuracy> {
        let mut correct = [0usize; 3];
        let mut total = [0usize; 3];
        let slices: Vec<&[usize]> = batches.iter().map(Vec::as_slice).collect();
        for (i, indices) in slices.iter().enumerate() {
            self.prefetch(&slices, i, RowLayout::SINGLE, |_| attention.reads_distances());
            let batch: NodeBatch<B> = attention.batch(&self.data, indices, device, None);
            let core = attention.core::<B>(&self.data, indices, device)?;
            let logits = step_logits(model, batch.graph, core.as_ref())?;
            let predictions = logits.argmax(2).into_data();
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
        Ok(SplitAccuracy {
            train: ratio(0),
            valid: ratio(1),
            test: ratio(2),
        })
    }
}

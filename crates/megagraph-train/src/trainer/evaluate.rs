//! The evaluation step of the training loop: accuracy on the train, valid and test nodes (of the
//! model's predictions, or of their Correct & Smooth post-processing).

use burn::tensor::activation::softmax;
use burn::tensor::{Tensor, TensorData};
use megagraph_models::{GraphAttentionBackend, GraphTransformer};

use super::NodeClassificationTrainer;
use crate::correct_smooth::CorrectAndSmooth;
use crate::data::{NodeBatch, SplitRole};
use crate::engine::StepAttention;
use crate::error::Result;
use crate::label_input::LabelInput;
use crate::prefetch::RowLayout;
use crate::step_attention::step_logits_mixed;

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

    /// [`evaluate`](Self::evaluate) with the attention core `attention`. With
    /// `[training] correct_smooth` the accuracies are those of the model's softmax predictions
    /// after [`CorrectAndSmooth`] (which reads the training labels only).
    pub(super) fn evaluate_with<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
        attention: &StepAttention,
    ) -> Result<SplitAccuracy> {
        let dataset = &self.data.dataset;
        let (n, classes) = (dataset.num_nodes(), dataset.num_classes);
        let correct_smooth = CorrectAndSmooth::from_config(&self.config.training);
        // the model's logits of every node, `[N, C]`, when a graph-wide step follows
        let whole_graph = correct_smooth.is_some() || self.propagation.is_some();
        let mut logits_of_nodes = whole_graph.then(|| vec![0.0f32; n * classes]);
        // the nodes whose logits the batches gave (in place: node `v` at position `v`)
        let mut placed: Vec<Option<u32>> = vec![None; n];
        let mut predicted: Vec<Option<i64>> = vec![None; n];
        let slices: Vec<&[usize]> = batches.iter().map(Vec::as_slice).collect();
        for (i, indices) in slices.iter().enumerate() {
            self.prefetch(&slices, i, RowLayout::SINGLE, |_| attention.reads_distances());
            let mut batch: NodeBatch<B> = attention.batch(&self.data, indices, device, None);
            if model.label_input.is_some() {
                let shown = LabelInput::evaluation(&self.data, &batch.nodes, batch.labels.dims(), device);
                batch.graph.label_input = Some(shown);
            }
            let core = attention.core::<B>(&self.data, indices, device)?;
            let input = self
                .input_propagation
                .as_ref()
                .map(|input| (input.as_ref(), input.edges(&dataset.graph, &batch.nodes)));
            let input = input.as_ref().map(|(propagation, edges)| (*propagation, edges));
            let logits = step_logits_mixed(model, batch.graph, core.as_ref(), input)?;
            let Some(logits_of_nodes) = logits_of_nodes.as_mut() else {
                record_predictions(&mut predicted, &batch.nodes, logits);
                continue;
            };
            let rows = logits.into_data().iter::<f32>().collect::<Vec<_>>();
            for (node, row) in batch.nodes.iter().zip(rows.chunks(classes.max(1))) {
                if let Some(node) = *node {
                    placed[node as usize] = Some(node);
                    let node = node as usize;
                    logits_of_nodes[node * classes..(node + 1) * classes].copy_from_slice(row);
                }
            }
        }
        if let Some(logits_of_nodes) = logits_of_nodes {
            let logits = Tensor::<B, 2>::from_data(TensorData::new(logits_of_nodes, [n, classes]), device);
            let logits = match &self.propagation {
                Some(propagation) => propagation.apply(logits, &propagation.edges(&dataset.graph, &placed)),
                None => logits,
            };
            match correct_smooth {
                Some(correct_smooth) => {
                    let probabilities = softmax(logits, 1).into_data().iter::<f32>().collect::<Vec<_>>();
                    for (slot, class) in predicted.iter_mut().zip(correct_smooth.predict(dataset, &probabilities)) {
                        *slot = Some(class as i64);
                    }
                }
                None => record_predictions(&mut predicted, &placed, logits.unsqueeze::<3>()),
            }
        }
        let mut correct = [0usize; 3];
        let mut total = [0usize; 3];
        for (node, (&label, predicted)) in dataset.labels.iter().zip(&predicted).enumerate() {
            let Some(predicted) = *predicted else { continue };
            let slot = match self.data.role(node as u32) {
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

/// Writes the argmax class of each row of `logits` (`[batch, seq, classes]`) to the node at its
/// position in `nodes` (row-major `[batch, seq]`, `None` = padding).
fn record_predictions<B: burn::tensor::backend::Backend>(predicted: &mut [Option<i64>], nodes: &[Option<u32>], logits: Tensor<B, 3>) {
    let classes = logits.argmax(2).into_data();
    for (node, class) in nodes.iter().zip(classes.iter::<i64>()) {
        if let Some(node) = *node {
            predicted[node as usize] = Some(class);
        }
    }
}

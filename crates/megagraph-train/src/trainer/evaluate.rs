//! The evaluation step of the training loop: accuracy on the train, valid and test nodes (of the
//! model's predictions, or of their Correct & Smooth post-processing), and the validation loss.

use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Tensor, TensorData};
use megagraph_models::{GraphAttentionBackend, GraphTransformer};

use super::NodeClassificationTrainer;
use crate::correct_smooth::CorrectAndSmooth;
use crate::data::{NodeBatch, SequenceDataset, SplitRole};
use crate::engine::StepAttention;
use crate::error::Result;
use crate::label_input::LabelInput;
use crate::prefetch::RowLayout;
use crate::step_attention::step_logits_mixed;

/// Accuracy on each split, and the loss on the validation nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitAccuracy {
    /// On training nodes.
    pub train: f64,
    /// On validation nodes.
    pub valid: f64,
    /// On test nodes.
    pub test: f64,
    /// Mean cross-entropy of the model's predictions (before any Correct & Smooth) on the
    /// validation nodes; 0 where there are none.
    pub valid_loss: f64,
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
        self.evaluate_with(model, batches, device, &StepAttention::Full, false)
            .unwrap_or_else(|_| unreachable!("full attention builds no edges and cannot fail"))
            .0
    }

    /// [`evaluate`](Self::evaluate) with the attention core `attention`. With
    /// `[training] correct_smooth` the accuracies are those of the model's softmax predictions
    /// after [`CorrectAndSmooth`] (which reads the training labels only); the validation loss is
    /// always that of the model's own predictions. With `keep_probabilities`, also the softmax
    /// probabilities of every node, `[nodes, classes]` (those of the predictions the validation
    /// loss reads), for a snapshot ensemble.
    pub(super) fn evaluate_with<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
        attention: &StepAttention,
        keep_probabilities: bool,
    ) -> Result<(SplitAccuracy, Option<Vec<f32>>)> {
        let (mut predictions, scored) = self.predict_with(model, batches, device, attention, keep_probabilities)?;
        let tally = SplitTally::of(&self.data, &scored);
        // the validation loss over the nodes the validation accuracy counts
        let valid_loss: f64 = (0..scored.len())
            .filter(|&node| SplitTally::counts(&self.data, node, &scored) == Some(SplitTally::VALID))
            .map(|node| predictions.loss[node])
            .sum();
        let valid_nodes = tally.total[SplitTally::VALID];
        let accuracy = SplitAccuracy {
            train: tally.accuracy(SplitTally::TRAIN),
            valid: tally.accuracy(SplitTally::VALID),
            test: tally.accuracy(SplitTally::TEST),
            valid_loss: if valid_nodes == 0 { 0.0 } else { valid_loss / valid_nodes as f64 },
        };
        Ok((accuracy, predictions.probabilities.take()))
    }

    /// The model's predictions of every node the `batches` hold ([`Predictions`]), and the
    /// classes evaluation scores: the model's, or with `[training] correct_smooth` those of
    /// [`CorrectAndSmooth`]. With `keep_probabilities` the predictions also hold the softmax
    /// probabilities of every node ([`Predictions::probabilities`]).
    pub(super) fn predict_with<B: GraphAttentionBackend>(
        &self,
        model: &GraphTransformer<B>,
        batches: &[Vec<usize>],
        device: &B::Device,
        attention: &StepAttention,
        keep_probabilities: bool,
    ) -> Result<(Predictions<'_>, Vec<Option<i64>>)> {
        let dataset = &self.data.dataset;
        let (n, classes) = (dataset.num_nodes(), dataset.num_classes);
        let correct_smooth = CorrectAndSmooth::from_config(&self.config.training);
        // the model's logits of every node, `[N, C]`, when a graph-wide step follows
        let whole_graph = correct_smooth.is_some() || self.propagation.is_some() || keep_probabilities;
        let mut logits_of_nodes = whole_graph.then(|| vec![0.0f32; n * classes]);
        // the nodes whose logits the batches gave (in place: node `v` at position `v`)
        let mut placed: Vec<Option<u32>> = vec![None; n];
        let mut predictions = Predictions::new(n, &dataset.labels);
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
                predictions.record(&batch.nodes, logits);
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
        let mut scored = None;
        if let Some(logits_of_nodes) = logits_of_nodes {
            let logits = Tensor::<B, 2>::from_data(TensorData::new(logits_of_nodes, [n, classes]), device);
            let logits = match &self.propagation {
                Some(propagation) => propagation.apply(logits, &propagation.edges(&dataset.graph, &placed)),
                None => logits,
            };
            predictions.record(&placed, logits.clone().unsqueeze::<3>());
            if correct_smooth.is_some() || keep_probabilities {
                let probabilities = softmax(logits, 1).into_data().iter::<f32>().collect::<Vec<_>>();
                if let Some(correct_smooth) = correct_smooth {
                    let corrected = correct_smooth.predict(dataset, &probabilities);
                    scored = Some(corrected.into_iter().map(|class| Some(class as i64)).collect());
                }
                predictions.probabilities = keep_probabilities.then_some(probabilities);
            }
        }
        let scored = scored.unwrap_or_else(|| predictions.class.clone());
        Ok((predictions, scored))
    }
}

/// Per split (train, valid, test): the labelled nodes that have a predicted class, and how many
/// of those classes are right. What evaluation's accuracies (and a snapshot ensemble's) count.
pub(super) struct SplitTally {
    /// Right classes per split.
    pub(super) correct: [usize; 3],
    /// Labelled nodes with a class per split.
    pub(super) total: [usize; 3],
}

impl SplitTally {
    /// Index of the training split.
    pub(super) const TRAIN: usize = 0;
    /// Index of the validation split.
    pub(super) const VALID: usize = 1;
    /// Index of the test split.
    pub(super) const TEST: usize = 2;

    /// The tally of `scored` (per node a predicted class, or `None`) against `data`'s labels.
    pub(super) fn of(data: &SequenceDataset, scored: &[Option<i64>]) -> Self {
        let mut tally = Self {
            correct: [0; 3],
            total: [0; 3],
        };
        for node in 0..scored.len() {
            if let (Some(split), Some(predicted)) = (Self::counts(data, node, scored), scored[node]) {
                tally.total[split] += 1;
                tally.correct[split] += usize::from(predicted == data.dataset.labels[node]);
            }
        }
        tally
    }

    /// The split whose accuracy counts `node`: one when the node is in a split, labelled, and
    /// has a class in `scored`; `None` otherwise.
    pub(super) fn counts(data: &SequenceDataset, node: usize, scored: &[Option<i64>]) -> Option<usize> {
        let labelled = data.dataset.labels.get(node).is_some_and(|&label| label >= 0);
        if !labelled || scored.get(node).copied().flatten().is_none() {
            return None;
        }
        match data.role(node as u32) {
            SplitRole::Train => Some(Self::TRAIN),
            SplitRole::Valid => Some(Self::VALID),
            SplitRole::Test => Some(Self::TEST),
            SplitRole::None => None,
        }
    }

    /// Accuracy on split `split`, 0 where it counts no node.
    pub(super) fn accuracy(&self, split: usize) -> f64 {
        match self.total[split] {
            0 => 0.0,
            total => self.correct[split] as f64 / total as f64,
        }
    }
}

/// The model's prediction of each node: its argmax class, that class's probability, and the
/// cross-entropy of its label.
pub(super) struct Predictions<'a> {
    /// Labels of every node (negative where unlabelled).
    labels: &'a [i64],
    /// Predicted class of each node, `None` until a batch gave its logits.
    pub(super) class: Vec<Option<i64>>,
    /// Probability of the predicted class of each node (0 until a batch gave its logits).
    pub(super) confidence: Vec<f64>,
    /// `-log p(label)` of each labelled node whose logits were given (0 otherwise).
    loss: Vec<f64>,
    /// Softmax probabilities of every node, `[nodes, classes]`, when asked for (see
    /// [`NodeClassificationTrainer::predict_with`]).
    pub(super) probabilities: Option<Vec<f32>>,
}

impl<'a> Predictions<'a> {
    /// No prediction yet for any of the nodes of `labels`.
    fn new(nodes: usize, labels: &'a [i64]) -> Self {
        Self {
            labels,
            class: vec![None; nodes],
            confidence: vec![0.0; nodes],
            loss: vec![0.0; nodes],
            probabilities: None,
        }
    }

    /// Records each row of `logits` (`[batch, seq, classes]`) for the node at its position in
    /// `nodes` (row-major `[batch, seq]`, `None` = padding).
    fn record<B: burn::tensor::backend::Backend>(&mut self, nodes: &[Option<u32>], logits: Tensor<B, 3>) {
        let classes = logits.dims()[2].max(1);
        let argmax = logits.clone().argmax(2).into_data();
        let log_probabilities = log_softmax(logits, 2).into_data().iter::<f32>().collect::<Vec<_>>();
        let rows = nodes.iter().zip(argmax.iter::<i64>()).zip(log_probabilities.chunks(classes));
        for ((node, class), row) in rows {
            let Some(node) = *node else { continue };
            let node = node as usize;
            self.class[node] = Some(class);
            let best = usize::try_from(class).ok().and_then(|class| row.get(class));
            self.confidence[node] = best.map_or(0.0, |&log_p| f64::from(log_p).exp());
            let label = self.labels[node];
            if let Some(&log_p) = usize::try_from(label).ok().and_then(|label| row.get(label)) {
                self.loss[node] = -f64::from(log_p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorData};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::Predictions;

    #[test]
    fn predictions_hold_each_nodes_argmax_confidence_and_float64_cross_entropy() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (batch, seq, classes, nodes) = (2, 5, 4, 12);
        // labels, one node unlabelled
        let labels: Vec<i64> = (0..nodes).map(|v| if v == 3 { -1 } else { rng.random_range(0..classes as i64) }).collect();
        // positions hold distinct nodes in a random order, two of them padding
        let mut order: Vec<u32> = (0..nodes as u32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        let mut positions: Vec<Option<u32>> = order[..batch * seq - 2].iter().copied().map(Some).collect();
        positions.insert(rng.random_range(0..positions.len()), None);
        positions.push(None);
        let logits: Vec<f64> = (0..batch * seq * classes).map(|_| rng.random_range(-4.0..4.0)).collect();
        let data = TensorData::new(logits.iter().map(|&x| x as f32).collect::<Vec<_>>(), [batch, seq, classes]);
        let mut predictions = Predictions::new(nodes, &labels);
        predictions.record(&positions, Tensor::<Flex, 3>::from_data(data, &Default::default()));

        let mut seen = vec![false; nodes];
        for (position, node) in positions.iter().enumerate() {
            let Some(node) = node.map(|v| v as usize) else { continue };
            seen[node] = true;
            let row = &logits[position * classes..(position + 1) * classes];
            let argmax = (0..classes).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
            assert_eq!(predictions.class[node], Some(argmax as i64), "seed {seed}, node {node}");
            let confidence = 1.0 / row.iter().map(|x| (x - row[argmax]).exp()).sum::<f64>();
            assert!((predictions.confidence[node] - confidence).abs() < 1e-5, "seed {seed}, node {node}");
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let log_sum = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            let expected = if labels[node] < 0 { 0.0 } else { log_sum - row[labels[node] as usize] };
            assert!((predictions.loss[node] - expected).abs() < 1e-5, "seed {seed}, node {node}: {} vs {expected}", predictions.loss[node]);
        }
        for node in (0..nodes).filter(|&v| !seen[v]) {
            let unseen = (predictions.class[node], predictions.confidence[node], predictions.loss[node]);
            assert_eq!(unseen, (None, 0.0, 0.0), "seed {seed}, node {node}");
        }
    }
}

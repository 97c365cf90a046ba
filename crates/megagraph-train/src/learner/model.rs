//! [`NodeClassifier`]: a [`GraphTransformer`] as a burn-train model.

use burn::module::Module;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};
use megagraph_models::{GraphAttentionBackend, GraphTransformer, GraphTransformerConfig, masked_smoothed_cross_entropy, materialize};

use super::{ScoredBatch, SequenceBatch};
use crate::step_attention::step_logits;

/// A [`GraphTransformer`] trained for node classification with burn-train: its
/// [`TrainStep`] and [`InferenceStep`] take a [`SequenceBatch`] and return a
/// [`ClassificationOutput`] over the batch's scored nodes, so Burn's `LossMetric`,
/// `AccuracyMetric` and the other classification metrics apply unchanged.
///
/// The loss is [`masked_smoothed_cross_entropy`] over the scored nodes (the mean over them) with
/// label smoothing [`label_smoothing`](Self::label_smoothing), the same as
/// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer)'s.
#[derive(Module, Debug)]
pub struct NodeClassifier<B: Backend> {
    /// The Graph Transformer.
    pub model: GraphTransformer<B>,
    /// Label smoothing ε of the loss (`[training] label_smoothing`). Default: 0.0.
    pub label_smoothing: f64,
}

impl<B: Backend> NodeClassifier<B> {
    /// Wraps `model` (without label smoothing).
    pub fn new(model: GraphTransformer<B>) -> Self {
        Self {
            model,
            label_smoothing: 0.0,
        }
    }

    /// Smooths the loss's targets with ε = `smoothing` (see
    /// [`masked_smoothed_cross_entropy`]).
    pub fn with_label_smoothing(mut self, smoothing: f64) -> Self {
        self.label_smoothing = smoothing;
        self
    }

    /// Initializes a fresh model from `config` on `device`. Its parameters are drawn now (not
    /// lazily at first use), so every clone of it — the learner's, a mesh's — holds the same
    /// values.
    pub fn init(config: &GraphTransformerConfig, device: &B::Device) -> Self {
        Self::new(materialize(config.init(device)))
    }

    /// The Graph Transformer.
    pub fn into_inner(self) -> GraphTransformer<B> {
        self.model
    }
}

impl<B: GraphAttentionBackend> NodeClassifier<B> {
    /// The loss and the logits of the scored nodes of a batch.
    ///
    /// - `output`: `[scored, classes]`; `targets`: `[scored]`; `loss`: `[1]`
    ///
    /// The model runs the batch's attention: full, or sparse over `batch.sparse`.
    ///
    /// # Panics
    ///
    /// If `batch.sparse`'s edges do not fit the batch (a batch from
    /// [`SequenceBatch::tensors`] always fits).
    pub fn forward_classification(&self, batch: ScoredBatch<B>) -> ClassificationOutput<B> {
        let logits = step_logits(&self.model, batch.graph, batch.sparse.as_ref())
            .unwrap_or_else(|error| panic!("sparse attention on a batch it does not fit: {error}"));
        let loss = masked_smoothed_cross_entropy(
            logits.clone(),
            batch.labels,
            batch.weight,
            batch.scored,
            self.label_smoothing,
        );
        let [rows, seq, classes] = logits.dims();
        let output = logits.reshape([rows * seq, classes]).select(0, batch.positions);
        ClassificationOutput::new(loss, output, batch.targets)
    }
}

impl<B> TrainStep for NodeClassifier<B>
where
    B: AutodiffBackend + GraphAttentionBackend,
{
    type Input = SequenceBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: SequenceBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let output = self.forward_classification(batch.tensors());
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl<B: GraphAttentionBackend> InferenceStep for NodeClassifier<B> {
    type Input = SequenceBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: SequenceBatch<B>) -> ClassificationOutput<B> {
        self.forward_classification(batch.tensors())
    }
}

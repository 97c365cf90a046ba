//! [`SingleDeviceEngine`]: forward, backward and AdamW in the calling thread.

use std::sync::Arc;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use megagraph_models::{GraphAttentionBackend, GraphTransformer, masked_smoothed_cross_entropy};
use megagraph_parallel::{OptimizerRecord, trainable};

use super::{EngineSetup, Inner, L2Penalty, RankFigures, StepAttention, StepEngine};
use crate::consistency::ConsistencyRegularization;
use crate::data::{NodeBatch, SequenceDataset};
use crate::error::Result;
use crate::input_propagation::InputPropagation;
use crate::label_input::LabelInput;
use crate::prediction_propagation::PredictionPropagation;
use crate::step_attention::step_logits_mixed;

/// The optimizer the single-device engine runs.
type Adam<B> = OptimizerAdaptor<AdamW, GraphTransformer<B>, B>;

/// Steps on one device: forward, backward and AdamW in the calling thread.
pub(crate) struct SingleDeviceEngine<B: AutodiffBackend> {
    model: Option<GraphTransformer<B>>,
    optimizer: Adam<B>,
    data: Arc<SequenceDataset>,
    structure_dropout: f64,
    label_smoothing: f64,
    l2: L2Penalty,
    propagation: Option<Arc<PredictionPropagation>>,
    input_propagation: Option<Arc<InputPropagation>>,
    consistency: Option<ConsistencyRegularization>,
    label_input: Option<LabelInput>,
    device: B::Device,
    figures: RankFigures,
    attention: StepAttention,
}

impl<B> SingleDeviceEngine<B>
where
    B: AutodiffBackend + GraphAttentionBackend,
    B::InnerBackend: GraphAttentionBackend,
{
    /// An engine training `model` (its parameters made trainable).
    pub fn new(model: GraphTransformer<Inner<B>>, setup: EngineSetup<B>) -> Self {
        let mut adam: Adam<B> = setup.optimizer.init();
        if let Some(record) = setup.record {
            adam = adam.load_record(record);
        }
        Self {
            model: Some(trainable(GraphTransformer::<B>::from_inner(model))),
            optimizer: adam,
            data: setup.data,
            structure_dropout: setup.structure_dropout,
            label_smoothing: setup.label_smoothing,
            l2: setup.l2,
            propagation: setup.propagation,
            input_propagation: setup.input_propagation,
            consistency: setup.consistency,
            label_input: setup.label_input,
            device: setup.device,
            figures: RankFigures::default(),
            attention: StepAttention::Full,
        }
    }

    fn current(&self) -> &GraphTransformer<B> {
        self.model
            .as_ref()
            .unwrap_or_else(|| unreachable!("the model is only taken during a step"))
    }
}

impl<B> StepEngine<B> for SingleDeviceEngine<B>
where
    B: AutodiffBackend + GraphAttentionBackend,
    B::InnerBackend: GraphAttentionBackend,
{
    fn step(&mut self, indices: &[usize], lr: f64, dropout_seed: u64) -> Result<Option<f64>> {
        let dropout =
            (self.structure_dropout > 0.0).then_some((self.structure_dropout, dropout_seed));
        megagraph_parallel::reset_thread_peak();
        // sparse steps build no distance rows: their core reads none
        let mut batch: NodeBatch<B> = self.attention.batch(&self.data, indices, &self.device, dropout);
        // with the label input, the loss scores the training nodes that do not show their label
        let (train_weight, train_nodes) = match &self.label_input {
            Some(labels) => {
                let shown = labels.training(&self.data, &batch.nodes, batch.labels.dims(), dropout_seed, &self.device);
                batch.graph.label_input = Some(shown.shown);
                (shown.scored, shown.scored_nodes)
            }
            None => (batch.train_weight.clone(), self.data.train_nodes(&batch.nodes)),
        };
        if train_nodes == 0 {
            return Ok(None);
        }
        let [size, rows, columns] = batch.graph.distance.dims();
        let index = RankFigures {
            index_bytes: batch.graph.distance.bytes(),
            dense_index_bytes: size * rows * columns,
            peak_bytes: None,
        };
        let core = self.attention.core::<B>(&self.data, indices, &self.device)?;
        let model = self
            .model
            .take()
            .unwrap_or_else(|| unreachable!("the model is put back after every step"));
        let samples = self.consistency.map_or(1, |c| c.samples);
        // the batch's edges of Â, built once for every sample and both propagations
        let graph = &self.data.dataset.graph;
        let edges = match (&self.propagation, &self.input_propagation) {
            (Some(propagation), _) => Some(propagation.edges(graph, &batch.nodes)),
            (None, Some(input)) => Some(input.edges(graph, &batch.nodes)),
            (None, None) => None,
        };
        let propagation = self.propagation.as_deref().zip(edges.as_ref());
        let input = self.input_propagation.as_deref().zip(edges.as_ref());
        let mut sampled = Vec::with_capacity(samples);
        for _ in 0..samples {
            // each forward pass draws its own dropout masks
            let logits = match step_logits_mixed(&model, batch.graph.clone(), core.as_ref(), input) {
                Ok(logits) => logits,
                Err(error) => {
                    self.model = Some(model);
                    return Err(error);
                }
            };
            sampled.push(match propagation {
                Some((propagation, edges)) => propagation.apply_to_batch(logits, edges),
                None => logits,
            });
        }
        let supervised = sampled
            .iter()
            .map(|logits| {
                masked_smoothed_cross_entropy(
                    logits.clone(),
                    batch.labels.clone(),
                    train_weight.clone(),
                    train_nodes,
                    self.label_smoothing,
                )
            })
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| unreachable!("a step runs at least one forward pass"))
            / samples as f64;
        let loss = match &self.consistency {
            Some(consistency) => supervised + consistency.loss(&sampled, present_positions(&batch.nodes, &batch.labels)),
            None => supervised,
        };
        let loss = self.l2.add_to(loss, &model);
        let value = loss.clone().into_scalar().elem::<f64>();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        self.model = Some(self.optimizer.step(lr, model, grads));
        // this thread's allocator peak: no device sync needed (and none paid every step)
        let step = RankFigures {
            peak_bytes: megagraph_parallel::thread_peak_bytes(),
            ..index
        };
        self.figures = self.figures.max(step);
        Ok(Some(value))
    }

    fn rank_figures(&self) -> Vec<RankFigures> {
        vec![self.figures]
    }

    fn set_attention(&mut self, attention: StepAttention) -> Result<()> {
        self.attention = attention;
        Ok(())
    }

    fn model(&mut self) -> Result<GraphTransformer<Inner<B>>> {
        Ok(self.current().valid())
    }

    fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>> {
        Ok(self.optimizer.to_record())
    }
}

/// 1.0 at the positions of `nodes` (row-major, the shape of `labels`) that hold a node, 0.0 at
/// padding.
fn present_positions<B: Backend>(nodes: &[Option<u32>], labels: &Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let values: Vec<f32> = nodes.iter().map(|node| f32::from(u8::from(node.is_some()))).collect();
    Tensor::from_data(TensorData::new(values, labels.dims()), &labels.device())
}

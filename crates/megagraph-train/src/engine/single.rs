//! [`SingleDeviceEngine`]: forward, backward and AdamW in the calling thread.

use std::sync::Arc;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, GradientsParams, Optimizer};
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::{GraphAttentionBackend, GraphTransformer, masked_smoothed_cross_entropy};
use megagraph_parallel::{OptimizerRecord, trainable};

use super::{EngineSetup, Inner, RankFigures, StepAttention, StepEngine};
use crate::data::{NodeBatch, SequenceDataset};
use crate::error::Result;
use crate::step_attention::step_logits;

/// The optimizer the single-device engine runs.
type Adam<B> = OptimizerAdaptor<AdamW, GraphTransformer<B>, B>;

/// Steps on one device: forward, backward and AdamW in the calling thread.
pub(crate) struct SingleDeviceEngine<B: AutodiffBackend> {
    model: Option<GraphTransformer<B>>,
    optimizer: Adam<B>,
    data: Arc<SequenceDataset>,
    structure_dropout: f64,
    label_smoothing: f64,
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
        let batch: NodeBatch<B> = self.attention.batch(&self.data, indices, &self.device, dropout);
        let train_nodes = self.data.train_nodes(&batch.nodes);
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
        let logits = match step_logits(&model, batch.graph, core.as_ref()) {
            Ok(logits) => logits,
            Err(error) => {
                self.model = Some(model);
                return Err(error);
            }
        };
        let loss = masked_smoothed_cross_entropy(
            logits,
            batch.labels,
            batch.train_weight,
            train_nodes,
            self.label_smoothing,
        );
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

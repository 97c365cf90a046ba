//! How the optimizer steps of a run execute: on one device ([`SingleDevice`]) or on a
//! `pp x cp x dp` mesh of workers ([`Mesh`]). The training loop (epochs, evaluation, early
//! stopping, checkpoints) is the same for both.

use std::sync::Arc;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::{GraphTransformer, masked_cross_entropy};
use megagraph_parallel::{
    ContextParallelBackend, NodeConfig, OptimizerRecord, ParallelConfig, ParallelTrainer,
    TrainerOptions, trainable,
};

use crate::data::{NodeBatch, SequenceDataset};
use crate::error::Result;
use crate::parallel::DatasetSource;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// Runs optimizer steps and hands out the parameters and the optimizer state.
pub(crate) trait StepEngine<B: AutodiffBackend> {
    /// One optimizer step with learning rate `lr` on the sequences at `indices`; structure
    /// dropout (if configured) draws from `dropout_seed`. `None` when the sequences hold no
    /// training node (nothing is done), else the step's loss.
    fn step(&mut self, indices: &[usize], lr: f64, dropout_seed: u64) -> Result<Option<f64>>;

    /// The current parameters (for evaluation and checkpoints).
    fn model(&mut self) -> Result<GraphTransformer<Inner<B>>>;

    /// The optimizer state of the whole model (for checkpoints).
    fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>>;

    /// What each rank held at most over the steps so far, in rank order (one entry on a single
    /// device).
    fn rank_figures(&self) -> Vec<RankFigures>;
}

/// The most one rank held over a run's steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RankFigures {
    /// Bytes of its largest distance index (dense or sparse, as held).
    pub index_bytes: usize,
    /// What a dense `u8` index of the same rows takes.
    pub dense_index_bytes: usize,
    /// Peak bytes of a step from the runtime's memory meter, when it can measure.
    pub peak_bytes: Option<usize>,
}

impl RankFigures {
    /// The larger of each figure.
    fn max(self, other: Self) -> Self {
        Self {
            index_bytes: self.index_bytes.max(other.index_bytes),
            dense_index_bytes: self.dense_index_bytes.max(other.dense_index_bytes),
            peak_bytes: match (self.peak_bytes, other.peak_bytes) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// What every engine starts from besides the parameters.
pub(crate) struct EngineSetup<B: AutodiffBackend> {
    /// AdamW's settings.
    pub optimizer: AdamWConfig,
    /// Optimizer state to resume from.
    pub record: Option<OptimizerRecord<B>>,
    /// The training data.
    pub data: Arc<SequenceDataset>,
    /// Structure dropout probability (0 = none).
    pub structure_dropout: f64,
    /// The device of single-device training and of the returned model.
    pub device: B::Device,
    /// The devices of a mesh's ranks: one per rank, or one shared by every rank.
    pub rank_devices: Vec<B::Device>,
    /// This process's place in a multi-node run (mesh engine only).
    pub nodes: Option<NodeConfig>,
}

/// The optimizer the single-device engine runs.
type Adam<B> = OptimizerAdaptor<AdamW, GraphTransformer<B>, B>;

/// Steps on one device: forward, backward and AdamW in the calling thread.
pub(crate) struct SingleDevice<B: AutodiffBackend> {
    model: Option<GraphTransformer<B>>,
    optimizer: Adam<B>,
    data: Arc<SequenceDataset>,
    structure_dropout: f64,
    device: B::Device,
    figures: RankFigures,
}

impl<B> SingleDevice<B>
where
    B: AutodiffBackend + megagraph_models::GraphAttentionBackend,
    B::InnerBackend: megagraph_models::GraphAttentionBackend,
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
            device: setup.device,
            figures: RankFigures::default(),
        }
    }

    fn current(&self) -> &GraphTransformer<B> {
        self.model
            .as_ref()
            .unwrap_or_else(|| unreachable!("the model is only taken during a step"))
    }
}

impl<B> StepEngine<B> for SingleDevice<B>
where
    B: AutodiffBackend + megagraph_models::GraphAttentionBackend,
    B::InnerBackend: megagraph_models::GraphAttentionBackend,
{
    fn step(&mut self, indices: &[usize], lr: f64, dropout_seed: u64) -> Result<Option<f64>> {
        let dropout =
            (self.structure_dropout > 0.0).then_some((self.structure_dropout, dropout_seed));
        megagraph_parallel::reset_thread_peak();
        let batch: NodeBatch<B> =
            self.data
                .batch_with_structure_dropout(indices, &self.device, dropout);
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
        let model = self
            .model
            .take()
            .unwrap_or_else(|| unreachable!("the model is put back after every step"));
        let logits = model.forward(batch.graph);
        let loss = masked_cross_entropy(logits, batch.labels, batch.train_weight, train_nodes);
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

    fn model(&mut self) -> Result<GraphTransformer<Inner<B>>> {
        Ok(self.current().valid())
    }

    fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>> {
        Ok(self.optimizer.to_record())
    }
}

/// Steps on a mesh of worker threads through [`ParallelTrainer`].
pub(crate) struct Mesh<B: ContextParallelBackend> {
    trainer: ParallelTrainer<B>,
    source: Arc<DatasetSource>,
    figures: Vec<RankFigures>,
}

impl<B: ContextParallelBackend> Mesh<B> {
    /// Starts the mesh of `layout` for steps of `sequences_per_step` sequences, with `model`'s
    /// parameters.
    pub fn start(
        layout: ParallelConfig,
        model: GraphTransformer<Inner<B>>,
        setup: EngineSetup<B>,
        sequences_per_step: usize,
    ) -> Result<Self> {
        let seq_len = setup.data.seq_len;
        let source = Arc::new(DatasetSource::new(setup.data, setup.structure_dropout));
        let mut options =
            TrainerOptions::new(seq_len, sequences_per_step).with_optimizer(setup.optimizer);
        if let Some(nodes) = setup.nodes {
            options = options.with_nodes(nodes);
        }
        let mut trainer =
            ParallelTrainer::new(layout, model, source.clone(), options, setup.rank_devices)?;
        if let Some(record) = setup.record {
            trainer.load_optimizer_record(record)?;
        }
        Ok(Self {
            trainer,
            source,
            figures: Vec::new(),
        })
    }
}

impl<B: ContextParallelBackend> StepEngine<B> for Mesh<B> {
    fn step(&mut self, indices: &[usize], lr: f64, dropout_seed: u64) -> Result<Option<f64>> {
        self.source.set_step_seed(dropout_seed);
        let output = self.trainer.step(indices, lr)?;
        for report in &output.ranks {
            let step = RankFigures {
                index_bytes: report.index_bytes,
                dense_index_bytes: report.dense_index_bytes,
                peak_bytes: report.peak_bytes,
            };
            if self.figures.len() <= report.rank {
                self.figures.resize(report.rank + 1, RankFigures::default());
            }
            self.figures[report.rank] = self.figures[report.rank].max(step);
        }
        Ok((output.train_nodes > 0).then_some(output.loss))
    }

    fn rank_figures(&self) -> Vec<RankFigures> {
        self.figures.clone()
    }

    fn model(&mut self) -> Result<GraphTransformer<Inner<B>>> {
        Ok(self.trainer.model()?)
    }

    fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>> {
        Ok(self.trainer.optimizer_record()?)
    }
}

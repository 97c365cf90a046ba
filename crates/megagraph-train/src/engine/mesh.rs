//! [`MeshEngine`]: steps on a `pp x cp x dp` mesh of worker threads.

use std::sync::Arc;

use megagraph_models::GraphTransformer;
use megagraph_parallel::{
    ContextParallelBackend, OptimizerRecord, ParallelConfig, ParallelTrainer, TrainerOptions,
};

use super::{EngineSetup, Inner, RankFigures, StepEngine};
use crate::error::Result;
use crate::parallel::DatasetSource;

/// Steps on a mesh of worker threads through [`ParallelTrainer`].
pub(crate) struct MeshEngine<B: ContextParallelBackend> {
    trainer: ParallelTrainer<B>,
    source: Arc<DatasetSource>,
    figures: Vec<RankFigures>,
}

impl<B: ContextParallelBackend> MeshEngine<B> {
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
        let mut options = TrainerOptions::new(seq_len, sequences_per_step)
            .with_optimizer(setup.optimizer)
            .with_timeout(setup.timeout)
            .with_label_smoothing(setup.label_smoothing);
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

impl<B: ContextParallelBackend> StepEngine<B> for MeshEngine<B> {
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

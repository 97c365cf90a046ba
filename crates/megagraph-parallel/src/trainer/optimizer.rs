//! The optimizer state of the mesh: [`OptimizerRecord`], gathered from and loaded into the
//! ranks.

use std::sync::Arc;

use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, Optimizer};
use megagraph_models::GraphTransformer;

use super::parallel_trainer::ParallelTrainer;
use crate::context::ContextParallelBackend;
use crate::worker::{Command, ReplyBody};
use crate::ParallelError;

/// The optimizer state of a model (or of one stage): AdamW's moments and step count per
/// parameter id, the record of Burn's `OptimizerAdaptor<AdamW, _, B>`. Parameter ids are those
/// of the model given to [`ParallelTrainer::new`], so the record of the whole mesh is the record
/// a single-device AdamW over the same model would hold, and either can resume the other.
pub type OptimizerRecord<B> =
    <OptimizerAdaptor<AdamW, GraphTransformer<B>, B> as Optimizer<GraphTransformer<B>, B>>::Record;

impl<B: ContextParallelBackend> ParallelTrainer<B> {
    /// The optimizer state of the whole model, gathered from replica `(cp_rank 0, dp_rank 0)` of
    /// every stage (every replica holds the same state). Save it with the model to resume.
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn optimizer_record(&mut self) -> Result<OptimizerRecord<B>, ParallelError> {
        let ranks = self.replica_ranks(0, 0)?;
        for rank in &ranks {
            self.send(*rank, Command::ExportOptimizer)?;
        }
        let replies = self.collect(&ranks, |body| matches!(body, ReplyBody::Optimizer(_)))?;
        let mut record: OptimizerRecord<B> = Default::default();
        for (_, body) in replies {
            if let ReplyBody::Optimizer(stage) = body {
                record.extend(stage);
            }
        }
        Ok(record)
    }

    /// Replaces the optimizer state of every rank by `record` (each keeps the entries of its
    /// stage's parameters): resumes from a saved [`optimizer_record`](Self::optimizer_record) or
    /// from a single-device AdamW's record over the same parameters.
    ///
    /// # Errors
    ///
    /// A worker's failure, or [`ParallelError::Stopped`].
    pub fn load_optimizer_record(
        &mut self,
        record: OptimizerRecord<B>,
    ) -> Result<(), ParallelError> {
        if let Some(failure) = &self.failure {
            return Err(ParallelError::Stopped(Box::new(failure.clone())));
        }
        let record = Arc::new(record);
        let all: Vec<usize> = (0..self.shape.world()).collect();
        for rank in &all {
            self.send(*rank, Command::ImportOptimizer(record.clone()))?;
        }
        self.collect(&all, |body| matches!(body, ReplyBody::OptimizerLoaded))?;
        Ok(())
    }
}

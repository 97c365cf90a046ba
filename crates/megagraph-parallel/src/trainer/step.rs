//! One optimizer step of the mesh and its [`StepOutput`].

use std::sync::Arc;
use std::time::Instant;

use super::parallel_trainer::ParallelTrainer;
use crate::context::ContextParallelBackend;
use crate::data::shard_sequences;
use crate::worker::{Command, ReplyBody, StepPlan};
use crate::{ParallelError, RankReport};

/// The outcome of one optimizer step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// The loss of the step: masked cross-entropy summed over all sequences divided by
    /// `train_nodes` (the single-device trainer's loss; over every process's sequences in a
    /// multi-node run). 0 when `train_nodes` is 0.
    pub loss: f64,
    /// Training nodes in the step's sequences. 0 means the step did nothing (like the
    /// single-device trainer, a batch without training nodes is skipped).
    pub train_nodes: usize,
    /// Wall time of the step, in seconds.
    pub seconds: f64,
    /// What each rank of this process measured, in rank order (empty for a skipped step).
    pub ranks: Vec<RankReport>,
}

impl<B: ContextParallelBackend> ParallelTrainer<B> {
    /// Runs one optimizer step with learning rate `lr` on `sequences` (indices into the batch
    /// source), sharded over the replicas and micro-batches. In a multi-node run `sequences`
    /// are the whole step's, the same on every node: they are sharded over all `num_nodes * dp`
    /// replicas and this node runs its own.
    ///
    /// # Errors
    ///
    /// [`ParallelError::TooFewSequences`] (the mesh stays usable), a worker's failure (the mesh
    /// stops), or [`ParallelError::Stopped`] after an earlier failure.
    pub fn step(&mut self, sequences: &[usize], lr: f64) -> Result<StepOutput, ParallelError> {
        if let Some(failure) = &self.failure {
            return Err(ParallelError::Stopped(Box::new(failure.clone())));
        }
        let replicas = match &self.nodes {
            None => shard_sequences(sequences, self.config.dp, self.config.micro_batches)?,
            Some(nodes) => {
                let dp = self.config.dp;
                shard_sequences(sequences, nodes.global_dp(dp), self.config.micro_batches)?
                    .into_iter()
                    .skip(nodes.node_rank * dp)
                    .take(dp)
                    .collect()
            }
        };
        let train_nodes = self.source.train_nodes(sequences);
        if train_nodes == 0 {
            return Ok(StepOutput {
                loss: 0.0,
                train_nodes: 0,
                seconds: 0.0,
                ranks: Vec::new(),
            });
        }
        let started = Instant::now();
        let plan = Arc::new(StepPlan {
            step: self.step,
            replicas,
            lr,
            train_nodes,
        });
        self.step += 1;
        let all: Vec<usize> = (0..self.shape.world()).collect();
        for rank in &all {
            self.send(*rank, Command::Step(plan.clone()))?;
        }
        let replies = self.collect(&all, |body| matches!(body, ReplyBody::Step(..)))?;
        let mut reduced_loss = None;
        let mut ranks: Vec<RankReport> = replies
            .into_iter()
            .filter_map(|(_, body)| match body {
                ReplyBody::Step(report, summed) => {
                    reduced_loss = reduced_loss.or(summed);
                    Some(report)
                }
                _ => None,
            })
            .collect();
        ranks.sort_by_key(|report| report.rank);
        let loss = match (&self.nodes, reduced_loss) {
            // the loss of every node, summed by the all-reduce
            (Some(_), Some(summed)) => summed,
            _ => ranks.iter().map(|report| report.loss).sum(),
        };
        Ok(StepOutput {
            loss,
            train_nodes,
            seconds: started.elapsed().as_secs_f64(),
            ranks,
        })
    }
}

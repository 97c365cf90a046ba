//! The epoch step of the training loop: when to stop before an epoch, and one epoch's
//! optimizer steps over the sequences in a seeded order under the warm-up/cosine schedule.

use std::time::Instant;

use megagraph_parallel::ContextParallelBackend;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::NodeClassificationTrainer;
use crate::observer::TrainObserver;
use crate::attention::AttentionMode;
use crate::attention_schedule::AttentionSchedule;
use crate::checkpoint::TrainState;
use crate::engine::{StepAttention, StepEngine};
use crate::error::Result;
use crate::prefetch::RowLayout;
use crate::schedule::WarmupCosine;

/// How a run's epochs are cut into steps.
pub(super) struct EpochPlan {
    /// The learning rate of each step.
    pub schedule: WarmupCosine,
    /// Sequences per step.
    pub batch_size: usize,
    /// Steps of a whole epoch.
    pub steps_per_epoch: usize,
    /// How a step reads the distance rows, so that they can be built ahead.
    pub rows: RowLayout,
}

/// What the training half of an epoch did.
pub(super) struct EpochLoss {
    /// Mean loss of its steps (NaN when none ran).
    pub loss: f64,
    /// The learning rate of its last step.
    pub learning_rate: f64,
    /// The steps (indices within the epoch) that ran full attention.
    pub full_steps: Vec<usize>,
    /// Wall-clock seconds of each step that ran.
    pub step_seconds: Vec<f64>,
}

impl NodeClassificationTrainer<'_> {
    /// The epochs of this run: `rows` is how a step of its engine reads the distance rows.
    pub(super) fn epoch_plan(&self, rows: RowLayout) -> EpochPlan {
        let batch_size = self.batch_size();
        let steps_per_epoch = self.data.num_sequences().div_ceil(batch_size);
        EpochPlan {
            schedule: self.config.schedule(steps_per_epoch),
            batch_size,
            steps_per_epoch,
            rows,
        }
    }

    /// Why the run stops before its next epoch (all epochs run, `max_steps` reached, or no
    /// better validation accuracy for `patience` epochs); `None` to go on.
    pub(super) fn stop_reason(&self, state: &TrainState) -> Option<String> {
        let training = &self.config.training;
        if state.epoch >= training.epochs {
            Some(format!("reached {} epochs", training.epochs))
        } else if self.step_limit_reached(state.step) {
            Some(format!("reached {} steps (max_steps)", state.step))
        } else if training.patience > 0 && state.epochs_without_improvement >= training.patience {
            Some(format!(
                "early stop: no better validation accuracy for {} epochs",
                training.patience
            ))
        } else {
            None
        }
    }

    fn step_limit_reached(&self, step: usize) -> bool {
        self.config.training.max_steps.is_some_and(|max| step >= max)
    }

    /// The optimizer steps of epoch `state.epoch + 1`: dropout and order depend only on
    /// (seed, epoch), so a resumed run repeats exactly. Counts the steps in `state.step`.
    /// Steps run full or sparse attention as `attention` says.
    ///
    /// # Errors
    ///
    /// A failing step (a mesh names the rank).
    pub(super) fn train_epoch<B: ContextParallelBackend>(
        &self,
        engine: &mut dyn StepEngine<B>,
        plan: &EpochPlan,
        state: &mut TrainState,
        device: &B::Device,
        attention: &AttentionSchedule,
        observer: &mut dyn TrainObserver,
    ) -> Result<EpochLoss> {
        let training = &self.config.training;
        let seed = training.seed;
        let epoch = state.epoch + 1;
        B::seed(device, seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64));
        let mut order: Vec<usize> = (0..self.data.num_sequences()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ (epoch as u64).rotate_left(32)));
        let steps = training
            .max_steps
            .map_or(plan.steps_per_epoch, |max| plan.steps_per_epoch.min(max - state.step));
        observer.epoch_started(epoch, training.epochs, steps);

        let (mut loss_sum, mut loss_steps) = (0.0, 0);
        let mut learning_rate = plan.schedule.at(state.step);
        let batches: Vec<&[usize]> = order.chunks(plan.batch_size).collect();
        let full = attention.epoch_full_steps(epoch, batches.len());
        let mut ran_full = Vec::new();
        let mut step_seconds = Vec::new();
        for (i, indices) in batches.iter().copied().enumerate() {
            if self.step_limit_reached(state.step) {
                break;
            }
            let step = attention.step(&full, i);
            if step == StepAttention::Full {
                ran_full.push(i);
            }
            engine.set_attention(step)?;
            let dropout_seed = seed ^ ((epoch as u64) << 40) ^ state.step as u64;
            self.prefetch(&batches, i, plan.rows, |step| attention.step(&full, step).reads_distances());
            let lr = plan.schedule.at(state.step);
            let started = Instant::now();
            let Some(loss) = engine.step(indices, lr, dropout_seed)? else {
                continue;
            };
            let seconds = started.elapsed().as_secs_f64();
            log::debug!("epoch {epoch}, step {}: loss {loss:.4}, {seconds:.3} s", state.step + 1);
            step_seconds.push(seconds);
            learning_rate = lr;
            state.step += 1;
            loss_sum += loss;
            loss_steps += 1;
            observer.step_finished(loss);
        }
        if attention.mode() != AttentionMode::Full {
            log::debug!("epoch {epoch}: steps that ran full attention: {ran_full:?}");
        }
        Ok(EpochLoss {
            loss: if loss_steps > 0 { loss_sum / loss_steps as f64 } else { f64::NAN },
            learning_rate,
            full_steps: ran_full,
            step_seconds,
        })
    }

    /// Asks the dataset to build the distance rows of the batches among the
    /// `data.prefetch_batches` after `batches[current]` that read them (`reads_rows(i)` for
    /// `batches[i]`: sparse steps read none). None on a multi-node run, whose other nodes read
    /// most of them.
    pub(super) fn prefetch(&self, batches: &[&[usize]], current: usize, rows: RowLayout, reads_rows: impl Fn(usize) -> bool) {
        let ahead = self.config.data.prefetch_batches.unwrap_or(0);
        if ahead == 0 || self.nodes.is_some() {
            return;
        }
        let upcoming: Vec<&[usize]> = (current + 1..(current + 1 + ahead).min(batches.len()))
            .filter(|&i| reads_rows(i))
            .map(|i| batches[i])
            .collect();
        self.data.prefetch(&upcoming, rows);
    }
}

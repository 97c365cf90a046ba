//! [`AttentionSchedule`]: which attention each step of a run takes under its `[attention]`
//! section, epoch by epoch (with reformation's tuned `β`). The command line's loop and
//! [`MegaGraphTrainer`](crate::MegaGraphTrainer) both step through it.

use crate::attention::{AttentionConfig, AttentionMode, full_attention_steps};
use crate::beta::BetaTuner;
use crate::step_attention::StepAttention;

/// The attention of a run's steps: full attention on the steps [`full_steps`](Self::full_steps)
/// names, sparse attention (reformed under the current `β`) on the others.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AttentionSchedule {
    config: AttentionConfig,
    /// Places reformation's tiles (the run's seed).
    seed: u64,
    /// Chooses `β` per epoch under `reform_threshold = "tuned"`.
    tuner: BetaTuner,
    /// Whether the model has Graphormer's graph token, which sparse steps then join to every
    /// node.
    graph_token: bool,
}

impl AttentionSchedule {
    /// The schedule of `config`, with `seed` placing reformation's tiles and `β`'s tuner at its
    /// start.
    pub fn new(config: AttentionConfig, seed: u64) -> Self {
        Self {
            config,
            seed,
            tuner: BetaTuner::default(),
            graph_token: false,
        }
    }

    /// The schedule for a model with (`true`) or without Graphormer's graph token: its sparse
    /// steps join the token to every node through sparse attention's global token (full steps
    /// carry it as the model always does).
    pub fn with_graph_token(self, graph_token: bool) -> Self {
        Self { graph_token, ..self }
    }

    /// The schedule continuing from `tuner` (the state a checkpoint saved).
    pub fn with_tuner(self, tuner: BetaTuner) -> Self {
        Self { tuner, ..self }
    }

    /// `β`'s tuner as it stands (saved with each checkpoint).
    pub fn tuner(&self) -> &BetaTuner {
        &self.tuner
    }

    /// The attention mode.
    pub fn mode(&self) -> AttentionMode {
        self.config.mode
    }

    /// The `[attention]` section the schedule follows.
    pub fn config(&self) -> &AttentionConfig {
        &self.config
    }

    /// The steps of an epoch of `steps` steps that run full attention: all of them in `full`
    /// mode, none in `sparse` mode, and `switch_freq` evenly spaced ones in `interleaved` mode
    /// ([`full_attention_steps`]).
    pub fn full_steps(&self, steps: usize) -> Vec<usize> {
        match self.config.mode {
            AttentionMode::Full => (0..steps).collect(),
            AttentionMode::Sparse => Vec::new(),
            AttentionMode::Interleaved => full_attention_steps(steps, self.config.switch_freq),
        }
    }

    /// [`full_steps`](Self::full_steps) of epoch `epoch`, logged in interleaved mode.
    pub fn epoch_full_steps(&self, epoch: usize, steps: usize) -> Vec<usize> {
        let full = self.full_steps(steps);
        if self.config.mode == AttentionMode::Interleaved {
            log::info!("epoch {epoch}: full attention on steps {full:?} of 0..{steps}, sparse on the others");
        }
        full
    }

    /// The attention of step `step` of an epoch whose full-attention steps are `full` (from
    /// [`full_steps`](Self::full_steps)).
    pub fn step(&self, full: &[usize], step: usize) -> StepAttention {
        if full.binary_search(&step).is_ok() {
            StepAttention::Full
        } else {
            self.sparse()
        }
    }

    /// The attention of evaluation: sparse and interleaved runs are evaluated with the sparse
    /// attention they train.
    pub fn evaluation(&self) -> StepAttention {
        match self.config.mode {
            AttentionMode::Full => StepAttention::Full,
            AttentionMode::Sparse | AttentionMode::Interleaved => self.sparse(),
        }
    }

    /// Sparse attention, reformed under the current `β`.
    fn sparse(&self) -> StepAttention {
        StepAttention::Sparse {
            reform: self.config.reform(self.tuner.beta(), self.seed),
            graph_token: self.graph_token,
        }
    }

    /// Records epoch `epoch` (1-based), which ended with training loss `loss` after `seconds`:
    /// under the tuned rule `β` moves for the next epoch and is returned; `None` otherwise.
    pub fn epoch_finished(&mut self, epoch: usize, loss: f64, seconds: f64) -> Option<f64> {
        self.config
            .tunes_beta()
            .then(|| self.tuner.observe(epoch, loss, seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{ReformRule, ReformSetting};

    #[test]
    fn steps_follow_the_mode_and_reformation_follows_the_tuned_beta() {
        let config = AttentionConfig {
            mode: AttentionMode::Interleaved,
            switch_freq: 2,
            reorder: true,
            block_reform: true,
            reform_threshold: ReformSetting::Rule(ReformRule::Tuned),
            ..AttentionConfig::default()
        };
        let mut schedule = AttentionSchedule::new(config.clone(), 3);
        let full = schedule.full_steps(4);
        assert_eq!(full, vec![0, 2]);
        assert_eq!(schedule.step(&full, 2), StepAttention::Full);
        let reform = |beta| StepAttention::Sparse {
            reform: config.reform(beta, 3),
            graph_token: false,
        };
        assert_eq!(schedule.step(&full, 1), reform(1.0));
        assert_eq!(schedule.evaluation(), reform(1.0));
        // a loss falling faster and faster moves β up from epoch 9 on
        let moved: Vec<Option<f64>> = (1..=9)
            .map(|epoch| schedule.epoch_finished(epoch, 10.0 - 0.05 * (epoch * epoch) as f64, 1.0))
            .collect();
        assert_eq!(moved[8], Some(1.5));
        assert_eq!(schedule.step(&full, 1), reform(1.5));
        let restored = AttentionSchedule::new(config.clone(), 3).with_tuner(schedule.tuner().clone());
        assert_eq!(restored, schedule);
        let sparse = AttentionSchedule::new(
            AttentionConfig {
                mode: AttentionMode::Sparse,
                ..AttentionConfig::default()
            },
            0,
        );
        assert!(sparse.full_steps(3).is_empty());
        assert_eq!(
            sparse.clone().epoch_finished(1, 1.0, 1.0),
            None,
            "β is tuned only under \"tuned\""
        );
        assert_eq!(
            AttentionSchedule::new(AttentionConfig::default(), 0).evaluation(),
            StepAttention::Full
        );
        // a model with the graph token: its sparse steps join it, its full steps stay full
        let token = AttentionSchedule::new(config.clone(), 3).with_graph_token(true);
        assert_eq!(token.step(&full, 2), StepAttention::Full);
        assert_eq!(
            token.step(&full, 1),
            StepAttention::Sparse {
                reform: config.reform(1.0, 3),
                graph_token: true
            }
        );
    }
}

//! What a validation runs ([`PlansToValidate`]), how ([`ValidationOptions`]) and where it is
//! ([`ValidationProgress`]).

use megagraph_planner::{ModelShape, Plan, Workload};
use serde::{Deserialize, Serialize};

/// What [`validate_plans`](super::validate_plans) (and
/// [`validate_plans_in_turn`](crate::validate_plans_in_turn)) run: `plans` for a model of
/// `shape` training on `workload`, each run as `options` say.
#[derive(Clone, Copy, Debug)]
pub struct PlansToValidate<'a> {
    /// The model's shape (a freshly initialized model of it runs).
    pub shape: &'a ModelShape,
    /// Sequence length and sequences per step (synthetic sequences).
    pub workload: &'a Workload,
    /// The plans, with their predictions.
    pub plans: &'a [Plan],
    /// How each plan runs.
    pub options: &'a ValidationOptions,
}

/// How [`validate_plans`](super::validate_plans) runs each plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationOptions {
    /// Steps run before measuring in every round (optimizer state is allocated in the first).
    /// Default: 1.
    pub warmup_steps: usize,
    /// Measured steps of each plan at least, spread over the rounds; the median time is kept.
    /// Default: 6.
    pub steps: usize,
    /// Measured seconds per plan to aim for: a plan predicted to step faster runs more steps
    /// (up to `max_steps`), so that a short step is measured as long as a slow one and a
    /// moment's slowness of the machine weighs as little. Default: 4.
    #[serde(default = "default_measured_seconds")]
    pub measured_seconds: f64,
    /// Most measured steps of a plan (at least `steps`). Default: 40.
    #[serde(default = "default_max_steps")]
    pub max_steps: usize,
    /// Rounds in which the plans take turns (at most `steps`). Default: 3.
    #[serde(default = "default_rounds")]
    pub rounds: usize,
    /// Seed of the model parameters and synthetic data. Default: 11.
    pub seed: u64,
    /// How long a rank waits for a peer before the run fails, in seconds. Default: 600.
    pub timeout_seconds: u64,
}

impl Default for ValidationOptions {
    fn default() -> Self {
        Self {
            warmup_steps: 1,
            steps: 6,
            measured_seconds: default_measured_seconds(),
            max_steps: default_max_steps(),
            rounds: default_rounds(),
            seed: 11,
            timeout_seconds: 600,
        }
    }
}

fn default_rounds() -> usize {
    3
}

fn default_measured_seconds() -> f64 {
    4.0
}

fn default_max_steps() -> usize {
    40
}

impl ValidationOptions {
    /// Rounds in which the plans take turns: `rounds` clamped to `1..=steps`.
    pub fn round_count(&self) -> usize {
        self.rounds.clamp(1, self.steps.max(1))
    }

    /// Measured steps of `plan`: enough for `measured_seconds` at its predicted step time,
    /// clamped to `steps..=max(steps, max_steps)`.
    pub fn measured_steps(&self, plan: &Plan) -> usize {
        let most = self.steps.max(self.max_steps);
        let predicted = plan.predicted.step_seconds;
        let wanted = if predicted > 0.0 && self.measured_seconds.is_finite() {
            (self.measured_seconds / predicted).ceil().min(most as f64) as usize
        } else {
            0
        };
        wanted.clamp(self.steps, most)
    }

    /// The measured steps of `plan` in each round: [`measured_steps`](Self::measured_steps)
    /// spread over the [`round_count`](Self::round_count) rounds, the first ones taking one
    /// more when they do not divide.
    pub fn measured_steps_per_round(&self, plan: &Plan) -> Vec<usize> {
        let (steps, rounds) = (self.measured_steps(plan), self.round_count());
        (0..rounds)
            .map(|round| steps / rounds + usize::from(round < steps % rounds))
            .collect()
    }

    /// Steps `plan` runs, warm-ups of every round included.
    pub fn steps_per_plan(&self, plan: &Plan) -> usize {
        self.round_count() * self.warmup_steps + self.measured_steps(plan)
    }
}

/// Where [`validate_plans`](super::validate_plans) is: reported after every step (plan after plan within a round,
/// round after round).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidationProgress {
    /// The round (0-based).
    pub round: usize,
    /// Rounds in all.
    pub rounds: usize,
    /// Index of the plan being run.
    pub plan: usize,
    /// Plans in all.
    pub plans: usize,
    /// Steps of this plan done (warm-ups included), over all rounds so far.
    pub step: usize,
    /// Steps of this plan in all (warm-ups included): plans may run different counts.
    pub steps: usize,
    /// Whether this was the last step of the round (of its last plan): the machine is idle
    /// until the next round starts.
    pub round_done: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_planner::{ParallelConfig, Prediction};

    /// A plan predicted at `predicted` seconds per step.
    fn plan(predicted: f64) -> Plan {
        Plan::predicted(
            ParallelConfig::uniform(1, 1, 2, 1, 4).unwrap(),
            Prediction {
                step_seconds: predicted,
                peak_bytes_per_device: 1,
                bottleneck: String::new(),
            },
        )
    }

    #[test]
    fn measured_steps_spread_over_the_rounds() {
        // a plan slow enough that `steps` sets its count
        let slow = plan(10.0);
        let steps_per_round = |steps, rounds| {
            ValidationOptions {
                steps,
                rounds,
                ..ValidationOptions::default()
            }
            .measured_steps_per_round(&slow)
        };
        assert_eq!(steps_per_round(6, 3), vec![2, 2, 2]);
        assert_eq!(steps_per_round(7, 3), vec![3, 2, 2]);
        // never more rounds than steps, never none
        assert_eq!(steps_per_round(2, 3), vec![1, 1]);
        assert_eq!(steps_per_round(1, 0), vec![1]);
        for (steps, rounds) in [(5, 2), (9, 4), (3, 3)] {
            assert_eq!(steps_per_round(steps, rounds).iter().sum::<usize>(), steps);
        }
        // one warm-up step in each of the 3 rounds
        assert_eq!(ValidationOptions::default().steps_per_plan(&slow), 3 + 6);
    }

    #[test]
    fn a_fast_plan_runs_enough_steps_for_the_measured_seconds() {
        let options = ValidationOptions::default();
        let at = |seconds: f64| options.measured_steps(&plan(seconds));
        // 4 s at least, 6 to 40 steps
        assert_eq!(at(0.15), 27);
        assert_eq!(at(0.5), 8);
        assert_eq!(at(1.0), 6);
        assert_eq!(at(0.01), 40);
        // no prediction: the fewest steps
        assert_eq!(at(0.0), 6);
        let plan = plan(0.15);
        assert_eq!(options.measured_steps_per_round(&plan), vec![9, 9, 9]);
        assert_eq!(options.steps_per_plan(&plan), 3 + 27);
        // `max_steps` below `steps` does not cut below `steps`; no time target: `steps`
        let capped = ValidationOptions {
            max_steps: 2,
            ..options.clone()
        };
        assert_eq!(capped.measured_steps(&plan), 6);
        let count_only = ValidationOptions {
            measured_seconds: 0.0,
            ..options
        };
        assert_eq!(count_only.measured_steps(&plan), 6);
    }
}

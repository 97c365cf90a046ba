//! Validation: run plans for a few steps on the local mesh ([`ParallelTrainer`] over a
//! [`SyntheticSource`]) and compare the measured step time and per-device peak memory with the
//! predictions ([`validate_plans`] → [`ValidationReport`]).
//!
//! The plans take turns, round after round (as an A/B comparison alternates its commands): in
//! every round each plan starts its mesh, runs its warm-up steps and its share of the measured
//! steps, and stops (burn-collective serves one all-reducing mesh per process at a time). Each
//! round starts at a later plan, so every plan runs early and late in a round. A drift of the
//! machine's speed then moves every plan alike instead of favouring the plans that ran while
//! the machine was fast. The measured step time is the median of the measured
//! steps (a round's first step also allocates the optimizer state, so it is a warm-up); the
//! measured peak of a plan is the largest per-rank
//! peak of live bytes over the measured steps, as the runtime's [`RankReport`] gives it when
//! [`CountingAllocator`](megagraph_parallel::CountingAllocator) is the global allocator. Errors
//! are `(predicted - measured) / measured`.
//!
//! A shared machine's speed also drifts between the profile and the validation. With
//! [`ValidationReport::add_in_turn_predictions`], every plan is predicted again from the profile
//! measured in turns with the rounds ([`InTurnProfile`]): its error is the cost model's own, the
//! machine running at the same speed for the prediction and the measurement.

use crate::api::{PlanError, evaluate};
use crate::cluster::ClusterSpec;
use crate::memory::format_bytes;
use crate::profile::ProfiledPart;
use crate::profiler::InTurnProfile;
use crate::realize::{SyntheticSource, init_model};
use crate::search::{Plan, SearchOptions};
use crate::sharing::SoloRatios;
use crate::workload::{ModelShape, Workload, WorkloadError};
use burn::tensor::backend::AutodiffBackend;
use megagraph_parallel::{
    BatchSource, ContextParallelBackend, MemoryMeter, ParallelError, ParallelTrainer, RankReport,
    TrainerOptions,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How [`validate_plans`] runs each plan.
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
        let predicted = plan.predicted_step_seconds;
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

/// Where [`validate_plans`] is: reported after every step (plan after plan within a round,
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

/// One plan, predicted and measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidatedPlan {
    /// The plan with `measured_step_seconds` and `measured_peak_bytes_per_device` filled in.
    pub plan: Plan,
    /// Wall seconds of every measured step.
    pub step_seconds: Vec<f64>,
    /// Seconds from the validation's start to the middle of every measured step.
    pub step_times: Vec<f64>,
    /// Peak bytes of every rank (largest over the measured steps), in rank order; `None` for a
    /// rank without memory accounting.
    pub rank_peak_bytes: Vec<Option<u64>>,
    /// Busy seconds (without waits on peers) of every rank, mean over the measured steps.
    pub rank_busy_seconds: Vec<f64>,
    /// The step time predicted from the profile measured again in turns with the validation
    /// ([`ValidationReport::add_in_turn_predictions`]), when it was.
    pub in_turn_predicted_step_seconds: Option<f64>,
}

/// The profile measured again in turns with a validation ([`InTurnProfile`]), summed up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InTurnSummary {
    /// Sessions measured (`plan --validate`: before the validation and after each round).
    pub sessions: usize,
    /// Timed passes over the profile's points, all sessions together.
    pub passes: usize,
    /// Median over the points of their time in the sessions over the profile's: above 1 when
    /// the machine ran slower during the validation than when it was profiled.
    pub drift: Option<f64>,
    /// The solo ratios of the sessions (or the profile's, when the sessions ran one copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solo: Option<SoloRatios>,
    /// Seconds from the validation's start to the middle of every session (negative for the
    /// one before it).
    pub session_times: Vec<f64>,
    /// Every session's time factor ([`InTurnProfile::session_time_factors`]): above 1 when the
    /// machine ran slower in it than over all sessions.
    pub session_time_factors: Vec<f64>,
}

/// Every validated plan, in the order given.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidationReport {
    /// The plans.
    pub plans: Vec<ValidatedPlan>,
    /// Sequence length.
    pub seq_len: usize,
    /// Sequences per step.
    pub sequences_per_step: usize,
    /// Warm-up steps per plan and round.
    pub warmup_steps: usize,
    /// Measured steps per plan at least ([`ValidationOptions::steps`]; a plan's
    /// `step_seconds` has them all).
    pub steps: usize,
    /// Rounds in which the plans took turns.
    pub rounds: usize,
    /// The profile measured again in turns with the plans, when it was
    /// ([`ValidationReport::add_in_turn_predictions`]).
    pub in_turn_profile: Option<InTurnSummary>,
    /// When the validation started (what `step_times` count from).
    #[serde(skip)]
    pub started: Instant,
}

/// Why validation failed.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// The model shape or workload is invalid.
    #[error("invalid model or workload: {0}")]
    Workload(#[from] WorkloadError),
    /// `steps` is 0 or no plan was given.
    #[error("validation option {field} = 0: it must be at least 1")]
    Zero {
        /// `steps` or `plans`.
        field: &'static str,
    },
    /// The runtime refused or failed a plan.
    #[error("plan pp={pp} cp={cp} dp={dp} micro_batches={micro_batches} failed: {source}")]
    Run {
        /// Pipeline stages.
        pp: usize,
        /// Context-parallel degree.
        cp: usize,
        /// Data-parallel degree.
        dp: usize,
        /// Micro-batches.
        micro_batches: usize,
        /// The runtime's error.
        source: ParallelError,
    },
}

impl ValidatedPlan {
    /// `(predicted - measured) / measured` of the step time.
    pub fn time_error(&self) -> Option<f64> {
        let measured = self.plan.measured_step_seconds?;
        (measured > 0.0).then(|| (self.plan.predicted_step_seconds - measured) / measured)
    }

    /// `(in-turn predicted - measured) / measured` of the step time: the error of the cost
    /// model with a profile measured in turns with the plans, when there is one.
    pub fn in_turn_time_error(&self) -> Option<f64> {
        let measured = self.plan.measured_step_seconds?;
        let predicted = self.in_turn_predicted_step_seconds?;
        (measured > 0.0).then(|| (predicted - measured) / measured)
    }

    /// Half the range of the measured step times over their median, `(max - min) / (2 *
    /// median)`: how far single steps strayed, to judge a time error against.
    pub fn time_spread(&self) -> Option<f64> {
        let median = self.plan.measured_step_seconds?;
        let (min, max) = range(&self.step_seconds);
        (median > 0.0 && min <= max).then(|| (max - min) / (2.0 * median))
    }

    /// `(predicted - measured) / measured` of the per-device peak memory, when measured.
    pub fn memory_error(&self) -> Option<f64> {
        let measured = self.plan.measured_peak_bytes_per_device? as f64;
        (measured > 0.0)
            .then(|| (self.plan.predicted_peak_bytes_per_device as f64 - measured) / measured)
    }
}

/// The smallest and largest of `values` (`(inf, -inf)` when there are none).
fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some(0.5 * (values[n / 2 - 1] + values[n / 2])),
    }
}

impl ValidationReport {
    /// Median of the absolute step-time errors.
    pub fn median_abs_time_error(&self) -> Option<f64> {
        median(
            self.plans
                .iter()
                .filter_map(|p| p.time_error().map(f64::abs))
                .collect(),
        )
    }

    /// Median of the absolute in-turn step-time errors (see
    /// [`ValidatedPlan::in_turn_time_error`]).
    pub fn median_abs_in_turn_time_error(&self) -> Option<f64> {
        median(
            self.plans
                .iter()
                .filter_map(|p| p.in_turn_time_error().map(f64::abs))
                .collect(),
        )
    }

    /// Predicts every plan again from `profile`'s [`table`](InTurnProfile::table), the profile
    /// measured in turns with the validation, for `shape` training on `workload` on `cluster`
    /// (as the plans were searched, with `options`), and records the predictions next to the
    /// measurements with a summary of the sessions.
    ///
    /// # Errors
    ///
    /// [`PlanError`]: the profile does not fit the shape, or a plan does not fit the cluster or
    /// workload.
    pub fn add_in_turn_predictions(
        &mut self,
        profile: &InTurnProfile,
        cluster: &ClusterSpec,
        shape: &ModelShape,
        workload: &Workload,
        options: &SearchOptions,
    ) -> Result<(), PlanError> {
        let table = profile.table();
        for row in &mut self.plans {
            let config = row.plan.to_parallel_config();
            let evaluation = evaluate(cluster, shape, workload, &table, &config, options)?;
            row.in_turn_predicted_step_seconds = Some(evaluation.plan.predicted_step_seconds);
        }
        let since_start = |instant: Instant| match instant.checked_duration_since(self.started) {
            Some(after) => after.as_secs_f64(),
            None => -(self.started - instant).as_secs_f64(),
        };
        self.in_turn_profile = Some(InTurnSummary {
            sessions: profile.sessions(),
            passes: profile.passes(),
            drift: profile.drift(),
            solo: table.solo,
            session_times: profile
                .session_instants()
                .into_iter()
                .map(since_start)
                .collect(),
            session_time_factors: profile.session_time_factors(),
        });
        Ok(())
    }

    /// Median of the absolute memory errors (plans with memory measured).
    pub fn median_abs_memory_error(&self) -> Option<f64> {
        median(
            self.plans
                .iter()
                .filter_map(|p| p.memory_error().map(f64::abs))
                .collect(),
        )
    }

    /// Whether memory was measured (the counting allocator was installed).
    pub fn memory_measured(&self) -> bool {
        self.plans
            .iter()
            .any(|p| p.plan.measured_peak_bytes_per_device.is_some())
    }
}

impl fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (fewest, most) = self
            .plans
            .iter()
            .map(|p| p.step_seconds.len())
            .fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
        let steps = if fewest >= most {
            most.to_string()
        } else {
            format!("{fewest} to {most}")
        };
        writeln!(
            f,
            "Validation: {} sequences x {} nodes per step, {steps} measured steps per plan over \
             {} rounds in turn ({} warm-up per round)",
            self.sequences_per_step, self.seq_len, self.rounds, self.warmup_steps
        )?;
        let in_turn = self.in_turn_profile.is_some();
        let in_turn_header = if in_turn {
            format!(" {:>9} {:>8}", "in turn", "error")
        } else {
            String::new()
        };
        writeln!(
            f,
            "  {:<28} {:>9} {:>9} {:>7} {:>8}{in_turn_header}   {:>10} {:>10} {:>8}",
            "plan", "pred. s", "meas. s", "spread", "error", "pred. mem", "meas. mem", "error"
        )?;
        let percent = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{:+.1}%", 100.0 * e));
        let median_percent =
            |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{:.1}%", 100.0 * e));
        for row in &self.plans {
            let p = &row.plan;
            let name = format!(
                "pp={} cp={} dp={} m={} {:?}",
                p.pp, p.cp, p.dp, p.micro_batches, p.stage_layers
            );
            let in_turn_columns = if in_turn {
                format!(
                    " {:>9} {:>8}",
                    row.in_turn_predicted_step_seconds
                        .map_or("-".to_string(), |s| format!("{s:.3}")),
                    percent(row.in_turn_time_error())
                )
            } else {
                String::new()
            };
            writeln!(
                f,
                "  {:<28} {:>9.3} {:>9} {:>7} {:>8}{in_turn_columns}   {:>10} {:>10} {:>8}",
                name,
                p.predicted_step_seconds,
                p.measured_step_seconds
                    .map_or("-".to_string(), |s| format!("{s:.3}")),
                row.time_spread()
                    .map_or("-".to_string(), |s| format!("±{:.0}%", 100.0 * s)),
                percent(row.time_error()),
                format_bytes(p.predicted_peak_bytes_per_device),
                p.measured_peak_bytes_per_device
                    .map_or("-".to_string(), format_bytes),
                percent(row.memory_error()),
            )?;
        }
        let in_turn_median = if in_turn {
            format!(
                " ({} with the profile measured in turn)",
                median_percent(self.median_abs_in_turn_time_error())
            )
        } else {
            String::new()
        };
        write!(
            f,
            "  median |error|: time {}{in_turn_median}, memory {}",
            median_percent(self.median_abs_time_error()),
            self.median_abs_memory_error().map_or(
                "- (the memory meter could not measure: on CPU, install \
                 megagraph_parallel::CountingAllocator as the global allocator)"
                    .to_string(),
                |e| format!("{:.1}%", 100.0 * e)
            )
        )?;
        if let Some(summary) = &self.in_turn_profile {
            write!(
                f,
                "\n  in turn: the profile's points measured again in {} sessions ({} timed \
                 passes), before the validation and after each round",
                summary.sessions, summary.passes
            )?;
            if let Some(drift) = summary.drift {
                write!(
                    f,
                    "; the machine ran them {:.0}% {} (median) than when profiled",
                    100.0 * (drift - 1.0).abs(),
                    if drift >= 1.0 { "slower" } else { "faster" }
                )?;
            }
            let factors = &summary.session_time_factors;
            if !factors.is_empty() {
                let (low, high) = range(factors);
                write!(
                    f,
                    "; session by session {low:.2}-{high:.2} of the sessions' time"
                )?;
            }
            if let Some(solo) = &summary.solo {
                let ratios: Vec<f64> = ProfiledPart::ALL
                    .into_iter()
                    .flat_map(|part| {
                        let ratios = solo.part(part);
                        [ratios.forward, ratios.backward]
                    })
                    .collect();
                let (low, high) = range(&ratios);
                write!(
                    f,
                    "; a part alone took {low:.2}-{high:.2} of its time with {} computing",
                    solo.copies
                )?;
            }
        }
        Ok(())
    }
}

/// The order in which `plans` plans run in `round` of `rounds`: the given order rotated to
/// start `round * plans / rounds` plans later, so that over the rounds every plan runs early,
/// in the middle and late in a round, and a machine whose speed changes within a round (or
/// after the in-turn profile's session at its start) favours none.
fn round_order(plans: usize, round: usize, rounds: usize) -> Vec<usize> {
    let offset = (round * plans).checked_div(rounds).unwrap_or(0);
    (0..plans).map(|k| (k + offset) % plans.max(1)).collect()
}

/// Runs each of `plans` for `options.steps` measured optimizer steps of `workload` on a mesh of
/// worker threads on `device` (every rank on the same device, as on a CPU) with a freshly
/// initialized model of `shape` and synthetic sequences, and records what was measured next to
/// the predictions. The plans take turns over `options.rounds` rounds, each round starting at
/// a later plan; in each, a plan starts its mesh, runs `options.warmup_steps` warm-up steps and
/// its share of the measured ones. Each
/// rank measures its memory with `meter`
/// ([`ThreadAllocatorMeter`](megagraph_parallel::ThreadAllocatorMeter) on CPU backends, a
/// `CubeMemoryMeter` on GPUs). `progress` is called after every step.
///
/// # Errors
///
/// [`ValidateError`]: an invalid shape or workload, no plans or steps, or a plan the runtime
/// refused or failed (naming the plan).
pub fn validate_plans<B: ContextParallelBackend>(
    shape: &ModelShape,
    workload: &Workload,
    plans: &[Plan],
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    options: &ValidationOptions,
    progress: &mut dyn FnMut(ValidationProgress),
) -> Result<ValidationReport, ValidateError> {
    shape.validate()?;
    workload.validate()?;
    if options.steps == 0 {
        return Err(ValidateError::Zero { field: "steps" });
    }
    if plans.is_empty() {
        return Err(ValidateError::Zero { field: "plans" });
    }
    let source: Arc<dyn BatchSource<B>> =
        Arc::new(SyntheticSource::new(shape, workload.seq_len, options.seed));
    let rounds = options.round_count();
    let failed = |plan: &Plan| {
        let (pp, cp, dp, micro_batches) = (plan.pp, plan.cp, plan.dp, plan.micro_batches);
        move |source: ParallelError| ValidateError::Run {
            pp,
            cp,
            dp,
            micro_batches,
            source,
        }
    };
    // per plan, its measured steps in each round
    let per_plan: Vec<Vec<usize>> = plans
        .iter()
        .map(|plan| options.measured_steps_per_round(plan))
        .collect();
    let mut seconds: Vec<Vec<f64>> = plans
        .iter()
        .map(|plan| Vec::with_capacity(options.measured_steps(plan)))
        .collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); plans.len()];
    let mut reports: Vec<Vec<Vec<RankReport>>> = vec![Vec::new(); plans.len()];
    let mut done = vec![0usize; plans.len()];
    let started = Instant::now();
    for round in 0..rounds {
        let order = round_order(plans.len(), round, rounds);
        for (position, &index) in order.iter().enumerate() {
            let (plan, per_round) = (&plans[index], &per_plan[index]);
            let measured = per_round.get(round).copied().unwrap_or(0);
            <B::InnerBackend as burn::tensor::backend::Backend>::seed(device, options.seed);
            let model = init_model::<<B as AutodiffBackend>::InnerBackend>(shape, device);
            let trainer_options =
                TrainerOptions::new(workload.seq_len, workload.sequences_per_step)
                    .with_timeout(Duration::from_secs(options.timeout_seconds.max(1)))
                    .with_meter(meter.clone());
            let mut trainer = ParallelTrainer::<B>::new(
                plan.to_parallel_config(),
                model,
                source.clone(),
                trainer_options,
                vec![device.clone()],
            )
            .map_err(failed(plan))?;
            let steps_now = options.warmup_steps + measured;
            for step in 0..steps_now {
                // every step of a plan on new sequences
                let n = workload.sequences_per_step;
                let first = done[index] * n;
                let sequences: Vec<usize> = (first..first + n).collect();
                let output = trainer.step(&sequences, 1e-4).map_err(failed(plan))?;
                if step >= options.warmup_steps {
                    times[index].push(started.elapsed().as_secs_f64() - output.seconds / 2.0);
                    seconds[index].push(output.seconds);
                    reports[index].push(output.ranks);
                }
                done[index] += 1;
                progress(ValidationProgress {
                    round,
                    rounds,
                    plan: index,
                    plans: plans.len(),
                    step: done[index],
                    steps: options.steps_per_plan(plan),
                    round_done: position + 1 == order.len() && step + 1 == steps_now,
                });
            }
        }
    }
    let mut validated = Vec::with_capacity(plans.len());
    for (((plan, seconds), step_times), reports) in
        plans.iter().zip(seconds).zip(times).zip(reports)
    {
        let world = reports.first().map_or(0, Vec::len);
        let rank_peak_bytes: Vec<Option<u64>> = (0..world)
            .map(|rank| {
                reports
                    .iter()
                    .filter_map(|step| step.get(rank).and_then(|r| r.peak_bytes))
                    .max()
                    .map(|b| b as u64)
            })
            .collect();
        let rank_busy_seconds: Vec<f64> = (0..world)
            .map(|rank| {
                reports
                    .iter()
                    .filter_map(|step| step.get(rank).map(|r| r.busy_seconds))
                    .sum::<f64>()
                    / reports.len().max(1) as f64
            })
            .collect();
        let mut plan = plan.clone();
        plan.measured_step_seconds = median(seconds.clone());
        plan.measured_peak_bytes_per_device = rank_peak_bytes.iter().flatten().copied().max();
        validated.push(ValidatedPlan {
            plan,
            step_seconds: seconds,
            step_times,
            rank_peak_bytes,
            rank_busy_seconds,
            in_turn_predicted_step_seconds: None,
        });
    }
    Ok(ValidationReport {
        plans: validated,
        seq_len: workload.seq_len,
        sequences_per_step: workload.sequences_per_step,
        warmup_steps: options.warmup_steps,
        steps: options.steps,
        rounds,
        in_turn_profile: None,
        started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharing::PassRatios;

    /// A validated plan predicted at `predicted` seconds whose measured steps took `steps`
    /// (median `measured`).
    fn validated(predicted: f64, measured: f64, steps: Vec<f64>) -> ValidatedPlan {
        ValidatedPlan {
            plan: Plan {
                pp: 1,
                cp: 1,
                dp: 2,
                micro_batches: 1,
                stage_layers: vec![4],
                predicted_step_seconds: predicted,
                predicted_peak_bytes_per_device: 1,
                bottleneck: String::new(),
                measured_step_seconds: Some(measured),
                measured_peak_bytes_per_device: None,
            },
            step_seconds: steps,
            step_times: Vec::new(),
            rank_peak_bytes: Vec::new(),
            rank_busy_seconds: Vec::new(),
            in_turn_predicted_step_seconds: None,
        }
    }

    #[test]
    fn spread_is_half_the_range_over_the_median() {
        let row = validated(1.0, 1.0, vec![0.9, 1.0, 1.3]);
        assert!((row.time_spread().unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(row.time_error(), Some(0.0));
    }

    #[test]
    fn the_profile_in_turn_adds_its_own_errors_and_summary() {
        let row = |predicted: f64, measured: f64, in_turn: Option<f64>| ValidatedPlan {
            in_turn_predicted_step_seconds: in_turn,
            ..validated(predicted, measured, vec![measured])
        };
        let mut report = ValidationReport {
            // the machine ran 20% slower than when profiled: every plan 1/1.2 of its time,
            // and the profile measured in turn sees it
            plans: vec![
                row(1.0, 1.2, None),
                row(2.0, 2.4, None),
                row(0.5, 0.6, None),
            ],
            seq_len: 64,
            sequences_per_step: 2,
            warmup_steps: 1,
            steps: 1,
            rounds: 1,
            in_turn_profile: None,
            started: Instant::now(),
        };
        assert!((report.median_abs_time_error().unwrap() - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(report.median_abs_in_turn_time_error(), None);
        let text = report.to_string();
        assert!(!text.contains("in turn:") && !text.contains("profile measured in turn"));
        for (plan, in_turn) in report.plans.iter_mut().zip([1.26, 2.28, 0.6]) {
            plan.in_turn_predicted_step_seconds = Some(in_turn);
        }
        report.in_turn_profile = Some(InTurnSummary {
            sessions: 4,
            passes: 8,
            drift: Some(1.2),
            solo: Some(SoloRatios {
                copies: 2,
                embedding: PassRatios {
                    forward: 0.8,
                    backward: 0.75,
                },
                layer_dense: PassRatios::ONE,
                attention: PassRatios {
                    forward: 0.9,
                    backward: 0.95,
                },
                head: PassRatios::ONE,
            }),
            session_times: vec![-1.0, 10.0, 20.0, 30.0],
            session_time_factors: vec![0.97, 1.0, 1.02, 1.01],
        });
        let errors: Vec<f64> = report
            .plans
            .iter()
            .filter_map(|p| p.in_turn_time_error())
            .collect();
        for (error, expected) in errors.iter().zip([0.05, -0.05, 0.0]) {
            assert!((error - expected).abs() < 1e-12, "{errors:?}");
        }
        assert!((report.median_abs_in_turn_time_error().unwrap() - 0.05).abs() < 1e-12);
        let text = report.to_string();
        for expected in [
            "5.0% with the profile measured in turn",
            "in 4 sessions (8 timed passes)",
            "ran them 20% slower (median) than when profiled; session by session 0.97-1.02 of \
             the sessions' time; a part alone took 0.75-1.00 of its time with 2 computing",
            "-16.7%     2.280    -5.0%",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
    }

    #[test]
    fn every_round_runs_every_plan_once_starting_later() {
        assert_eq!(round_order(10, 0, 3), (0..10).collect::<Vec<_>>());
        assert_eq!(round_order(10, 1, 3), vec![3, 4, 5, 6, 7, 8, 9, 0, 1, 2]);
        assert_eq!(round_order(10, 2, 3), vec![6, 7, 8, 9, 0, 1, 2, 3, 4, 5]);
        // over the rounds no plan is always first or always last: mean positions stay within
        // a third of the middle
        let (plans, rounds) = (10, 3);
        for plan in 0..plans {
            let mean = (0..rounds)
                .map(|round| {
                    let order = round_order(plans, round, rounds);
                    order.iter().position(|&p| p == plan).unwrap() as f64
                })
                .sum::<f64>()
                / rounds as f64;
            assert!(
                (mean - 4.5).abs() <= 1.5,
                "plan {plan}: mean position {mean}"
            );
        }
        assert_eq!(round_order(1, 2, 3), vec![0]);
        assert_eq!(round_order(0, 0, 3), Vec::<usize>::new());
        assert_eq!(round_order(4, 0, 0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn measured_steps_spread_over_the_rounds() {
        // a plan slow enough that `steps` sets its count
        let slow = validated(10.0, 10.0, Vec::new()).plan;
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
        let at =
            |seconds: f64| options.measured_steps(&validated(seconds, seconds, Vec::new()).plan);
        // 4 s at least, 6 to 40 steps
        assert_eq!(at(0.15), 27);
        assert_eq!(at(0.5), 8);
        assert_eq!(at(1.0), 6);
        assert_eq!(at(0.01), 40);
        // no prediction: the fewest steps
        assert_eq!(at(0.0), 6);
        let plan = validated(0.15, 0.15, Vec::new()).plan;
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

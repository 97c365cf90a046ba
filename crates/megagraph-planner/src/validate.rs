//! Validation: run plans for a few steps on the local mesh ([`ParallelTrainer`] over a
//! [`SyntheticSource`]) and compare the measured step time and per-device peak memory with the
//! predictions ([`validate_plans`] → [`ValidationReport`]).
//!
//! The plans take turns, round after round (as an A/B comparison alternates its commands): in
//! every round each plan starts its mesh, runs its warm-up steps and its share of the measured
//! steps, and stops (burn-collective serves one all-reducing mesh per process at a time). A
//! drift of the machine's speed then moves every plan alike instead of favouring the plans
//! that ran while the machine was fast. The measured step time is the median of the measured
//! steps (a round's first step also allocates the optimizer state, so it is a warm-up); the
//! measured peak of a plan is the largest per-rank
//! peak of live bytes over the measured steps, as the runtime's [`RankReport`] gives it when
//! [`CountingAllocator`](megagraph_parallel::CountingAllocator) is the global allocator. Errors
//! are `(predicted - measured) / measured`.

use crate::memory::format_bytes;
use crate::profile::ProfiledPart;
use crate::realize::{SyntheticSource, init_model};
use crate::search::Plan;
use crate::workload::{ModelShape, Workload, WorkloadError};
use burn::tensor::backend::AutodiffBackend;
use megagraph_parallel::{
    BatchSource, ContextParallelBackend, MemoryMeter, ParallelError, ParallelTrainer, RankReport,
    TrainerOptions,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How [`validate_plans`] runs each plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationOptions {
    /// Steps run before measuring in every round (optimizer state is allocated in the first).
    /// Default: 1.
    pub warmup_steps: usize,
    /// Measured steps of each plan, spread over the rounds; the median time is kept.
    /// Default: 6.
    pub steps: usize,
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
            rounds: default_rounds(),
            seed: 11,
            timeout_seconds: 600,
        }
    }
}

fn default_rounds() -> usize {
    3
}

impl ValidationOptions {
    /// The measured steps of each round: `steps` spread over `rounds` rounds (clamped to
    /// `1..=steps`), the first `steps % rounds` rounds taking one more.
    pub fn measured_steps_per_round(&self) -> Vec<usize> {
        let rounds = self.rounds.clamp(1, self.steps.max(1));
        (0..rounds)
            .map(|round| self.steps / rounds + usize::from(round < self.steps % rounds))
            .collect()
    }

    /// Steps every plan runs, warm-ups of every round included.
    pub fn steps_per_plan(&self) -> usize {
        self.measured_steps_per_round().len() * self.warmup_steps + self.steps
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
    /// Steps per plan (warm-up included).
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
    /// Peak bytes of every rank (largest over the measured steps), in rank order; `None` for a
    /// rank without memory accounting.
    pub rank_peak_bytes: Vec<Option<u64>>,
    /// Busy seconds (without waits on peers) of every rank, mean over the measured steps.
    pub rank_busy_seconds: Vec<f64>,
}

/// How fast this machine ran one profiled part around a validation, against the profile's
/// value ([`measure_speed_check`](crate::profiler::measure_speed_check)): on a shared machine
/// whose speed drifts, how far it drifted since the profile, and how much during the
/// validation, to read the time errors against.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpeedCheck {
    /// The part measured.
    pub part: ProfiledPart,
    /// Its size (rows).
    pub size: usize,
    /// Forward plus backward seconds in the profile.
    pub profiled_seconds: f64,
    /// Forward plus backward seconds of every check (`plan --validate`: before the validation
    /// and after each round).
    pub measured_seconds: Vec<f64>,
}

impl SpeedCheck {
    /// Mean measured seconds over the profiled ones: above 1 when the machine ran slower than
    /// when it was profiled.
    pub fn ratio(&self) -> Option<f64> {
        let n = self.measured_seconds.len();
        (n > 0 && self.profiled_seconds > 0.0)
            .then(|| self.measured_seconds.iter().sum::<f64>() / n as f64 / self.profiled_seconds)
    }
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
    /// Measured steps per plan.
    pub steps: usize,
    /// Rounds in which the plans took turns.
    pub rounds: usize,
    /// The machine's speed around the validation against the profile's, when checked.
    pub speed_check: Option<SpeedCheck>,
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

    /// Half the range of the measured step times over their median, `(max - min) / (2 *
    /// median)`: how far single steps strayed, to judge a time error against.
    pub fn time_spread(&self) -> Option<f64> {
        let median = self.plan.measured_step_seconds?;
        let (min, max) = self
            .step_seconds
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| {
                (lo.min(s), hi.max(s))
            });
        (median > 0.0 && min <= max).then(|| (max - min) / (2.0 * median))
    }

    /// `(predicted - measured) / measured` of the per-device peak memory, when measured.
    pub fn memory_error(&self) -> Option<f64> {
        let measured = self.plan.measured_peak_bytes_per_device? as f64;
        (measured > 0.0)
            .then(|| (self.plan.predicted_peak_bytes_per_device as f64 - measured) / measured)
    }
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
        writeln!(
            f,
            "Validation: {} sequences x {} nodes per step, {} measured steps per plan over {} \
             rounds in turn ({} warm-up per round)",
            self.sequences_per_step, self.seq_len, self.steps, self.rounds, self.warmup_steps
        )?;
        writeln!(
            f,
            "  {:<28} {:>11} {:>11} {:>7} {:>8}   {:>10} {:>10} {:>8}",
            "plan", "pred. s", "meas. s", "spread", "error", "pred. mem", "meas. mem", "error"
        )?;
        let percent = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{:+.1}%", 100.0 * e));
        for row in &self.plans {
            let p = &row.plan;
            let name = format!(
                "pp={} cp={} dp={} m={} {:?}",
                p.pp, p.cp, p.dp, p.micro_batches, p.stage_layers
            );
            writeln!(
                f,
                "  {:<28} {:>11.3} {:>11} {:>7} {:>8}   {:>10} {:>10} {:>8}",
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
        write!(
            f,
            "  median |error|: time {}, memory {}",
            self.median_abs_time_error()
                .map_or("-".to_string(), |e| format!("{:.1}%", 100.0 * e)),
            self.median_abs_memory_error().map_or(
                "- (the memory meter could not measure: on CPU, install \
                 megagraph_parallel::CountingAllocator as the global allocator)"
                    .to_string(),
                |e| format!("{:.1}%", 100.0 * e)
            )
        )?;
        if let Some(check) = &self.speed_check
            && let Some(ratio) = check.ratio()
        {
            let ms: Vec<String> = check
                .measured_seconds
                .iter()
                .map(|s| format!("{:.2}", 1e3 * s))
                .collect();
            write!(
                f,
                "\n  speed check: {} at {} rows took {:.2} ms in the profile and {} ms around \
                 this validation (mean {:+.0}%)",
                check.part.name(),
                check.size,
                1e3 * check.profiled_seconds,
                ms.join(" / "),
                100.0 * (ratio - 1.0),
            )?;
        }
        Ok(())
    }
}

/// Runs each of `plans` for `options.steps` measured optimizer steps of `workload` on a mesh of
/// worker threads on `device` (every rank on the same device, as on a CPU) with a freshly
/// initialized model of `shape` and synthetic sequences, and records what was measured next to
/// the predictions. The plans take turns over `options.rounds` rounds; in each, a plan starts
/// its mesh, runs `options.warmup_steps` warm-up steps and its share of the measured ones. Each
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
    let measured_per_round = options.measured_steps_per_round();
    let rounds = measured_per_round.len();
    let total_steps = options.steps_per_plan();
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
    let mut seconds = vec![Vec::with_capacity(options.steps); plans.len()];
    let mut reports: Vec<Vec<Vec<RankReport>>> =
        vec![Vec::with_capacity(options.steps); plans.len()];
    let mut done = vec![0usize; plans.len()];
    for (round, &measured) in measured_per_round.iter().enumerate() {
        for (index, plan) in plans.iter().enumerate() {
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
                    steps: total_steps,
                    round_done: index + 1 == plans.len() && step + 1 == steps_now,
                });
            }
        }
    }
    let mut validated = Vec::with_capacity(plans.len());
    for ((plan, seconds), reports) in plans.iter().zip(seconds).zip(reports) {
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
            rank_peak_bytes,
            rank_busy_seconds,
        });
    }
    Ok(ValidationReport {
        plans: validated,
        seq_len: workload.seq_len,
        sequences_per_step: workload.sequences_per_step,
        warmup_steps: options.warmup_steps,
        steps: options.steps,
        rounds,
        speed_check: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            rank_peak_bytes: Vec::new(),
            rank_busy_seconds: Vec::new(),
        }
    }

    #[test]
    fn spread_is_half_the_range_over_the_median() {
        let row = validated(1.0, 1.0, vec![0.9, 1.0, 1.3]);
        assert!((row.time_spread().unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(row.time_error(), Some(0.0));
    }

    #[test]
    fn a_speed_check_reports_the_drift_since_the_profile() {
        let row = |predicted: f64, measured: f64| validated(predicted, measured, vec![measured]);
        let mut report = ValidationReport {
            // the machine runs 20% slower than when profiled: every plan 1/1.2 of its time
            plans: vec![row(1.0, 1.2), row(2.0, 2.4), row(0.5, 0.6)],
            seq_len: 64,
            sequences_per_step: 2,
            warmup_steps: 1,
            steps: 1,
            rounds: 1,
            speed_check: None,
        };
        assert!((report.median_abs_time_error().unwrap() - 1.0 / 6.0).abs() < 1e-12);
        assert!(!report.to_string().contains("speed check"));
        report.speed_check = Some(SpeedCheck {
            part: ProfiledPart::LayerDense,
            size: 64,
            profiled_seconds: 0.010,
            measured_seconds: vec![0.011, 0.013],
        });
        assert!((report.speed_check.as_ref().unwrap().ratio().unwrap() - 1.2).abs() < 1e-12);
        let expected = "took 10.00 ms in the profile and 11.00 / 13.00 ms around this \
                        validation (mean +20%)";
        assert!(report.to_string().contains(expected), "{report}");
    }

    #[test]
    fn measured_steps_spread_over_the_rounds() {
        let steps_per_round = |steps, rounds| {
            ValidationOptions {
                steps,
                rounds,
                ..ValidationOptions::default()
            }
            .measured_steps_per_round()
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
        assert_eq!(ValidationOptions::default().steps_per_plan(), 3 + 6);
    }
}

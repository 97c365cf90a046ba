//! Validation: run plans for a few steps on the local mesh ([`ParallelTrainer`] over a
//! [`SyntheticSource`]) and compare the measured step time and per-device peak memory with the
//! predictions ([`validate_plans`] → [`ValidationReport`]).
//!
//! The measured step time is the median of the steps after the warm-up ones (the first step
//! also allocates the optimizer state); the measured peak of a plan is the largest per-rank
//! peak of live bytes over the measured steps, as the runtime's [`RankReport`] gives it when
//! [`CountingAllocator`](megagraph_parallel::CountingAllocator) is the global allocator. Errors
//! are `(predicted - measured) / measured`.

use crate::memory::format_bytes;
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
    /// Steps run before measuring (optimizer state is allocated in the first). Default: 1.
    pub warmup_steps: usize,
    /// Measured steps; the median time is kept. Default: 3.
    pub steps: usize,
    /// Seed of the model parameters and synthetic data. Default: 11.
    pub seed: u64,
    /// How long a rank waits for a peer before the run fails, in seconds. Default: 600.
    pub timeout_seconds: u64,
}

impl Default for ValidationOptions {
    fn default() -> Self {
        Self {
            warmup_steps: 1,
            steps: 3,
            seed: 11,
            timeout_seconds: 600,
        }
    }
}

/// Where [`validate_plans`] is: reported after every step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidationProgress {
    /// Index of the plan being run.
    pub plan: usize,
    /// Plans in all.
    pub plans: usize,
    /// Steps of this plan done (warm-up included).
    pub step: usize,
    /// Steps per plan (warm-up included).
    pub steps: usize,
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

/// Every validated plan, in the order given.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidationReport {
    /// The plans.
    pub plans: Vec<ValidatedPlan>,
    /// Sequence length.
    pub seq_len: usize,
    /// Sequences per step.
    pub sequences_per_step: usize,
    /// Warm-up steps per plan.
    pub warmup_steps: usize,
    /// Measured steps per plan.
    pub steps: usize,
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
            "Validation: {} sequences x {} nodes per step, {} warm-up + {} measured steps per plan",
            self.sequences_per_step, self.seq_len, self.warmup_steps, self.steps
        )?;
        writeln!(
            f,
            "  {:<28} {:>11} {:>11} {:>8}   {:>10} {:>10} {:>8}",
            "plan", "pred. s", "meas. s", "error", "pred. mem", "meas. mem", "error"
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
                "  {:<28} {:>11.3} {:>11} {:>8}   {:>10} {:>10} {:>8}",
                name,
                p.predicted_step_seconds,
                p.measured_step_seconds
                    .map_or("-".to_string(), |s| format!("{s:.3}")),
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
        )
    }
}

/// Runs each of `plans` for `options.warmup_steps + options.steps` optimizer steps of
/// `workload` on a mesh of worker threads on `device` (every rank on the same device, as on a
/// CPU) with a freshly initialized model of `shape` and synthetic sequences, and records what
/// was measured next to the predictions. Each rank measures its memory with `meter`
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
    let total_steps = options.warmup_steps + options.steps;
    let mut validated = Vec::with_capacity(plans.len());
    for (index, plan) in plans.iter().enumerate() {
        let failed = |source: ParallelError| ValidateError::Run {
            pp: plan.pp,
            cp: plan.cp,
            dp: plan.dp,
            micro_batches: plan.micro_batches,
            source,
        };
        <B::InnerBackend as burn::tensor::backend::Backend>::seed(device, options.seed);
        let model = init_model::<<B as AutodiffBackend>::InnerBackend>(shape, device);
        let trainer_options = TrainerOptions::new(workload.seq_len, workload.sequences_per_step)
            .with_timeout(Duration::from_secs(options.timeout_seconds.max(1)))
            .with_meter(meter.clone());
        let mut trainer = ParallelTrainer::<B>::new(
            plan.to_parallel_config(),
            model,
            source.clone(),
            trainer_options,
            vec![device.clone()],
        )
        .map_err(failed)?;
        let mut seconds = Vec::with_capacity(options.steps);
        let mut reports: Vec<Vec<RankReport>> = Vec::with_capacity(options.steps);
        for step in 0..total_steps {
            let n = workload.sequences_per_step;
            let sequences: Vec<usize> = (step * n..(step + 1) * n).collect();
            let output = trainer.step(&sequences, 1e-4).map_err(failed)?;
            if step >= options.warmup_steps {
                seconds.push(output.seconds);
                reports.push(output.ranks);
            }
            progress(ValidationProgress {
                plan: index,
                plans: plans.len(),
                step: step + 1,
                steps: total_steps,
            });
        }
        drop(trainer);
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
    })
}

//! [`validate_plans`]: the plans run in turns on the local mesh, round after round.

use super::options::{PlansToValidate, ValidationProgress};
use super::report::{ValidatedPlan, ValidationReport, median};
use crate::realize::{SyntheticSource, init_model};
use burn::tensor::backend::AutodiffBackend;
use megagraph_parallel::{
    BatchSource, ContextParallelBackend, MemoryMeter, ParallelError, ParallelTrainer, RankReport,
    TrainerOptions,
};
use megagraph_planner::{Measurement, Plan, WorkloadError};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The order in which `plans` plans run in `round` of `rounds`: the given order rotated to
/// start `round * plans / rounds` plans later, so that over the rounds every plan runs early,
/// in the middle and late in a round, and a machine whose speed changes within a round (or
/// after the in-turn profile's session at its start) favours none.
fn round_order(plans: usize, round: usize, rounds: usize) -> Vec<usize> {
    let offset = (round * plans).checked_div(rounds).unwrap_or(0);
    (0..plans).map(|k| (k + offset) % plans.max(1)).collect()
}

/// Runs each of `run`'s `plans` for `options.steps` measured optimizer steps of `workload` on a mesh of
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
    run: PlansToValidate<'_>,
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    progress: &mut dyn FnMut(ValidationProgress),
) -> Result<ValidationReport, ValidateError> {
    let PlansToValidate { shape, workload, plans, options } = run;
    shape.validate()?;
    workload.validate()?;
    if options.steps == 0 {
        return Err(ValidateError::Zero { field: "steps" });
    }
    if plans.is_empty() {
        return Err(ValidateError::Zero { field: "plans" });
    }
    let source: Arc<dyn BatchSource<B>> =
        Arc::new(match workload.near_pairs_per_row {
            // the sparse index the planner counted, so the measurement confirms it
            Some(per_row) => SyntheticSource::new(shape, workload.seq_len, options.seed).with_near_pairs(per_row, options.seed),
            None => SyntheticSource::new(shape, workload.seq_len, options.seed),
        });
    let rounds = options.round_count();
    let failed = |plan: &Plan| {
        let (pp, cp, dp, micro_batches) = (
            plan.layout.pp,
            plan.layout.cp,
            plan.layout.dp,
            plan.layout.micro_batches,
        );
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
                plan.layout.clone(),
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
        let rank_index_bytes: Vec<u64> = (0..world)
            .map(|rank| {
                reports
                    .iter()
                    .filter_map(|step| step.get(rank).map(|r| r.index_bytes as u64))
                    .max()
                    .unwrap_or(0)
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
        let predicted_index_bytes = workload.index_bytes_per_micro_batch(plan.layout.cp, plan.layout.dp, plan.layout.micro_batches);
        let mut plan = plan.clone();
        plan.measured = median(seconds.clone()).map(|step_seconds| Measurement {
            step_seconds,
            peak_bytes_per_device: rank_peak_bytes.iter().flatten().copied().max(),
        });
        validated.push(ValidatedPlan {
            plan,
            step_seconds: seconds,
            step_times,
            rank_peak_bytes,
            predicted_index_bytes,
            rank_index_bytes,
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
}

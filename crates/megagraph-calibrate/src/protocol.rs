//! The validation protocol of `megagraph plan --validate` as a library function:
//! [`validate_plans_in_turn`] runs the plans in turns on the local mesh and, with a measured
//! profile, measures that profile again before the validation and after every round
//! ([`InTurnProfile`]), then predicts every plan again from it.

use crate::profiler::{InTurnProfile, MeasureError, ProfilerOptions};
use crate::validate::{
    InTurnSummary, PlansToValidate, ValidateError, ValidationProgress, ValidationReport,
    validate_plans,
};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_planner::{
    ClusterSpec, ModelShape, PlanError, ProfileTable, SearchOptions, Workload, evaluate,
};
use std::sync::Arc;
use std::time::Instant;

/// The measured profile a validation measures again in turns with its rounds, and what the
/// plans were searched with (to predict them again from it).
#[derive(Clone, Copy, Debug)]
pub struct InTurn<'a> {
    /// The measured profile the plans were searched with.
    pub profile: &'a ProfileTable,
    /// How it was measured: its sessions run one warm-up pass each (their modules are new) and
    /// share its timed passes (`repeats / sessions` each, rounded up).
    pub profiler: &'a ProfilerOptions,
    /// The cluster the plans were searched for.
    pub cluster: &'a ClusterSpec,
    /// The options the plans were searched with.
    pub search: &'a SearchOptions,
}

/// Why [`validate_plans_in_turn`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// Running the plans failed.
    #[error(transparent)]
    Validate(#[from] ValidateError),
    /// Measuring the profile in turn failed.
    #[error("measuring the profile in turn with the validation: {0}")]
    Measure(#[from] MeasureError),
    /// Predicting the plans from the profile measured in turn failed.
    #[error("predicting the plans from the profile measured in turn: {0}")]
    Plan(#[from] PlanError),
}

/// [`validate_plans`] (see there for `run`, `device`, `meter` and `progress`) with, when `in_turn` is given, its profile measured again in sessions that
/// take turns with the rounds: one before the validation and one after each round (when the
/// machine is idle). Every plan is then predicted again from the profile measured in turn
/// ([`ValidatedPlan::in_turn_predicted_step_seconds`](crate::ValidatedPlan)) and the report
/// sums the sessions up ([`ValidationReport::in_turn_profile`]).
///
/// # Errors
///
/// [`CalibrateError`]: a plan failed, a session could not be measured, or the profile measured
/// in turn cannot predict the plans.
pub fn validate_plans_in_turn<B: ContextParallelBackend>(
    run: PlansToValidate<'_>,
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    in_turn: Option<InTurn<'_>>,
    progress: &mut dyn FnMut(ValidationProgress),
) -> Result<ValidationReport, CalibrateError> {
    let Some(in_turn) = in_turn else {
        return Ok(validate_plans::<B>(run, device, meter, progress)?);
    };
    let PlansToValidate { shape, workload, options, .. } = run;
    let mut profile = InTurnProfile::new(in_turn.profile.clone());
    // a session: a warm-up pass (the session's modules are new) and the profile's timed passes
    // split over the sessions (one before the rounds, one after each)
    let sessions = options.round_count() + 1;
    let session = ProfilerOptions {
        warmup: 1,
        repeats: in_turn.profiler.repeats.div_ceil(sessions),
        ..in_turn.profiler.clone()
    };
    profile.measure::<B>(shape, device, meter.as_ref(), &session)?;
    let mut failed = None;
    let mut each_step = |p: ValidationProgress| {
        progress(p);
        if p.round_done
            && failed.is_none()
            && let Err(error) = profile.measure::<B>(shape, device, meter.as_ref(), &session)
        {
            failed = Some(error);
        }
    };
    let report = validate_plans::<B>(run, device, meter.clone(), &mut each_step);
    let mut report = report?;
    if let Some(error) = failed {
        return Err(error.into());
    }
    report.add_in_turn_predictions(&profile, in_turn.cluster, shape, workload, in_turn.search)?;
    Ok(report)
}

impl ValidationReport {
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
            let evaluation = evaluate(cluster, shape, workload, &table, &row.plan.layout, options)?;
            row.in_turn_predicted_step_seconds = Some(evaluation.plan.predicted.step_seconds);
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
}

//! The runtime's own memory: what a rank of the parallel runtime holds beyond the memory
//! model's terms, realized with one real training step ([`runtime_overhead_bytes`]).

use crate::validate::{PlansToValidate, ValidateError, ValidationOptions, validate_plans};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter, ParallelConfig};
use megagraph_planner::{
    FitOptions, ModelShape, Plan, PlanError, Prediction, ProfileTable, Workload, predict_memory,
};
use std::sync::Arc;

/// Why the runtime overhead could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum OverheadError {
    /// The memory model cannot predict the step (the profile does not fit the shape).
    #[error("predicting the step's memory: {0}")]
    Predict(#[from] PlanError),
    /// The training step failed.
    #[error("running the step: {0}")]
    Run(#[from] ValidateError),
}

/// What a rank of the parallel runtime holds beyond the memory model's terms (autodiff and
/// optimizer bookkeeping, allocator and runtime structures): one real training step of a
/// one-layer model of `shape` on one rank at `device`, one sequence of `seq_len` nodes,
/// measured peak (with `meter`) minus the model's prediction from `table` (at least 0). The
/// profiler stores it in [`ProfileTable::runtime_overhead_bytes`].
///
/// # Errors
///
/// [`OverheadError`]: `table` does not fit `shape`, or the step failed.
pub fn runtime_overhead_bytes<B: ContextParallelBackend>(
    table: &ProfileTable,
    shape: &ModelShape,
    seq_len: usize,
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    seed: u64,
) -> Result<u64, OverheadError> {
    let one_layer = ModelShape {
        layers: 1,
        ..shape.clone()
    };
    let workload = Workload {
        seq_len,
        sequences_per_step: 1,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let layout = ParallelConfig::single_device(1);
    let predicted: u64 = predict_memory(
        &one_layer,
        &workload,
        table,
        &layout,
        &FitOptions::default(),
    )?
    .iter()
    .map(|stage| stage.total())
    .max()
    .unwrap_or(0);
    let plan = Plan::predicted(
        layout,
        Prediction {
            step_seconds: 0.0,
            peak_bytes_per_device: predicted,
            bottleneck: String::new(),
        },
    );
    let validation = ValidationOptions {
        warmup_steps: 1,
        steps: 2,
        measured_seconds: 0.0,
        max_steps: 2,
        rounds: 1,
        seed,
        timeout_seconds: 600,
    };
    let run = PlansToValidate {
        shape: &one_layer,
        workload: &workload,
        plans: &[plan],
        options: &validation,
    };
    let report = validate_plans::<B>(run, device, meter, &mut |_| {})?;
    let measured = report
        .plans
        .first()
        .and_then(|p| p.plan.measured_peak_bytes_per_device())
        .unwrap_or(predicted);
    Ok(measured.saturating_sub(predicted))
}

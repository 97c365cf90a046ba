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
//! [`validate_plans_in_turn`](crate::validate_plans_in_turn), every plan is predicted again from the profile
//! measured in turns with the rounds ([`InTurnProfile`](crate::InTurnProfile)): its error is the cost model's own, the
//! machine running at the same speed for the prediction and the measurement.

mod options;
mod report;
mod run;

pub use options::{PlansToValidate, ValidationOptions, ValidationProgress};
pub use report::{InTurnSummary, ValidatedPlan, ValidationReport};
pub use run::{ValidateError, validate_plans};

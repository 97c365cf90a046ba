//! [`plan_temporal`]: DepBloom's window and refinement count from a [`TemporalProfile`].
//!
//! **Refinement count.** Only counts whose measured step takes at most [`TIME_BUDGET`] × the
//! plain batch's are considered. The plan takes the smallest one whose staleness (intra-chunk
//! dependency ratio) is at most the reference small batch's. When none reaches it, the counts
//! are walked upward while each next one pays: it removes at least the share of the staleness
//! gap (plain batch minus reference) that it adds of the budget's headroom
//! (`(TIME_BUDGET - 1)` × the plain step); the count where more chunks stop paying is taken.
//!
//! **Window.** At that count, the candidate window with the least predicted epoch seconds
//! ([`TemporalPrediction`]); windows within [`WINDOW_TOLERANCE`] of it count as ties, and
//! among ties the lowest cross-shard ratio wins (fewer stale cross-shard reads), then the
//! faster, then the larger window.

use serde::{Deserialize, Serialize};

use super::error::TemporalPlanError;
use super::model::{StepLine, TemporalPrediction, predict};
use super::profile::{RefineSample, TemporalProfile, TemporalSetting, WindowSample};

/// The most a refined step may take, as a multiple of the plain batch's step.
pub const TIME_BUDGET: f64 = 1.5;

/// Windows whose predicted epoch is within this share of the least one count as equally fast
/// (the model is no more precise than that); among them the lowest cross-shard ratio wins.
pub const WINDOW_TOLERANCE: f64 = 0.01;

/// Why the plan took its refinement count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RefineReason {
    /// The plain batch is already no staler than the reference batch.
    PlainIsFresh,
    /// The smallest count within the time budget whose staleness reaches the reference's.
    ReachesReference,
    /// No count within the budget reaches the reference, and more chunks stop paying here:
    /// `next` (the next count within the budget, if any) removes a smaller share of the
    /// staleness gap than it adds of the budget's headroom.
    StopsPaying {
        /// The next count within the budget, which did not pay.
        next: Option<usize>,
    },
}

/// A refinement count the search considered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefineCandidate {
    /// Chunks per batch.
    pub refine: usize,
    /// Its step's seconds / the plain batch's.
    pub time_vs_plain: f64,
    /// Its intra-chunk dependency ratio.
    pub staleness: f64,
    /// Whether its step is within [`TIME_BUDGET`] × the plain batch's.
    pub within_budget: bool,
}

/// A window the search considered, at the chosen refinement count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowCandidate {
    /// The window's sharding statistics.
    pub sample: WindowSample,
    /// The predicted epoch.
    pub predicted: TemporalPrediction,
}

/// DepBloom's suggested window and refinement count, with the candidates and numbers that
/// decided them ([`explain`](TemporalPlan::explain)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemporalPlan {
    /// What the profile was measured for: dataset, model, backend, workers, batch size.
    #[serde(flatten)]
    pub setting: TemporalSetting,
    /// The suggested window in events (`--window`).
    pub window: usize,
    /// The suggested refinement count (`--refine`).
    pub refine: usize,
    /// The predicted epoch at `window` and `refine`.
    pub predicted: TemporalPrediction,
    /// Why `refine`.
    pub refine_reason: RefineReason,
    /// The small batch whose staleness refinement aims at.
    pub reference_batch: usize,
    /// Its intra-batch dependency ratio.
    pub reference_staleness: f64,
    /// Seconds of the plain batch's step.
    pub plain_seconds_per_batch: f64,
    /// The fixed seconds of a step in the fitted step line.
    pub step_overhead_seconds: f64,
    /// The seconds per event in the fitted step line.
    pub seconds_per_event: f64,
    /// Every refinement count measured.
    pub refine_candidates: Vec<RefineCandidate>,
    /// Every window, predicted at `refine`.
    pub window_candidates: Vec<WindowCandidate>,
}

/// Suggests DepBloom's window and refinement count from `profile` (see the module docs).
///
/// # Errors
///
/// [`TemporalPlanError::Invalid`] when the profile is invalid ([`TemporalProfile::validate`]).
pub fn plan_temporal(profile: &TemporalProfile) -> Result<TemporalPlan, TemporalPlanError> {
    profile.validate()?;
    let plain = &profile.refine[0];
    let budget = TIME_BUDGET * plain.seconds_per_batch;
    let refine_candidates: Vec<RefineCandidate> = profile
        .refine
        .iter()
        .map(|s| RefineCandidate {
            refine: s.refine,
            time_vs_plain: s.seconds_per_batch / plain.seconds_per_batch,
            staleness: s.dependency_ratio,
            within_budget: s.seconds_per_batch <= budget,
        })
        .collect();
    let within: Vec<&RefineSample> = profile
        .refine
        .iter()
        .filter(|s| s.seconds_per_batch <= budget)
        .collect();
    let (chosen, refine_reason) = choose_refine(profile, &within);
    let line = StepLine::fit(profile);
    let window_candidates: Vec<WindowCandidate> = profile
        .windows
        .iter()
        .map(|w| WindowCandidate {
            sample: w.clone(),
            predicted: predict(profile, line, w, chosen),
        })
        .collect();
    let least = window_candidates
        .iter()
        .map(|c| c.predicted.epoch_seconds)
        .fold(f64::INFINITY, f64::min);
    let best = window_candidates
        .iter()
        .filter(|c| c.predicted.epoch_seconds <= least * (1.0 + WINDOW_TOLERANCE))
        .min_by(|a, b| {
            (a.sample.cross_shard_ratio.total_cmp(&b.sample.cross_shard_ratio))
                .then(a.predicted.epoch_seconds.total_cmp(&b.predicted.epoch_seconds))
                .then(b.sample.window.cmp(&a.sample.window))
        })
        .map(|c| c.predicted.clone())
        .ok_or_else(|| TemporalPlanError::invalid("windows", "[]", "must hold at least one candidate window"))?;
    log::info!(
        "temporal plan for {} workers, batch {}: window {}, refine {} ({:.3} s per epoch predicted)",
        profile.setting.workers,
        profile.setting.batch_size,
        best.window,
        best.refine,
        best.epoch_seconds
    );
    Ok(TemporalPlan {
        setting: profile.setting.clone(),
        window: best.window,
        refine: best.refine,
        predicted: best,
        refine_reason,
        reference_batch: profile.reference_batch,
        reference_staleness: profile.reference_dependency_ratio,
        plain_seconds_per_batch: plain.seconds_per_batch,
        step_overhead_seconds: line.overhead,
        seconds_per_event: line.per_event,
        refine_candidates,
        window_candidates,
    })
}

/// The refinement count among `within` (the counts within the time budget, the plain batch
/// first) and why.
fn choose_refine<'p>(profile: &TemporalProfile, within: &[&'p RefineSample]) -> (&'p RefineSample, RefineReason) {
    let plain = within[0];
    let reference = profile.reference_dependency_ratio;
    if plain.dependency_ratio <= reference {
        return (plain, RefineReason::PlainIsFresh);
    }
    if let Some(fresh) = within.iter().find(|s| s.dependency_ratio <= reference) {
        return (fresh, RefineReason::ReachesReference);
    }
    let gap = plain.dependency_ratio - reference;
    let headroom = (TIME_BUDGET - 1.0) * plain.seconds_per_batch;
    let mut current = plain;
    for next in &within[1..] {
        let removed = (current.dependency_ratio - next.dependency_ratio) / gap;
        let added = (next.seconds_per_batch - current.seconds_per_batch).max(0.0) / headroom;
        if removed < added {
            return (
                current,
                RefineReason::StopsPaying {
                    next: Some(next.refine),
                },
            );
        }
        current = next;
    }
    (current, RefineReason::StopsPaying { next: None })
}

//! What a validation measured: [`ValidationReport`], a [`ValidatedPlan`] per plan, and its
//! table ([`Display`](std::fmt::Display)).

use megagraph_planner::{Plan, PlanReport, ProfiledPart, SoloRatios, format_bytes};
use serde::Serialize;
use std::fmt;
use std::time::Instant;

/// One plan, predicted and measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidatedPlan {
    /// The plan with its [`measured`](Plan::measured) part filled in.
    pub plan: Plan,
    /// Wall seconds of every measured step.
    pub step_seconds: Vec<f64>,
    /// Seconds from the validation's start to the middle of every measured step.
    pub step_times: Vec<f64>,
    /// Peak bytes of every rank (largest over the measured steps), in rank order; `None` for a
    /// rank without memory accounting.
    pub rank_peak_bytes: Vec<Option<u64>>,
    /// Distance-index bytes one micro-batch's block takes on a rank, as the planner's memory
    /// model counts them ([`Workload::index_bytes_per_micro_batch`](megagraph_planner::Workload::index_bytes_per_micro_batch)).
    pub predicted_index_bytes: u64,
    /// Distance-index bytes of every rank's largest block (over the measured steps), as the
    /// runtime held them, in rank order.
    pub rank_index_bytes: Vec<u64>,
    /// Busy seconds (without waits on peers) of every rank, mean over the measured steps.
    pub rank_busy_seconds: Vec<f64>,
    /// The step time predicted from the profile measured again in turns with the validation
    /// ([`ValidationReport::add_in_turn_predictions`]), when it was.
    pub in_turn_predicted_step_seconds: Option<f64>,
}

/// The profile measured again in turns with a validation ([`InTurnProfile`](crate::InTurnProfile)), summed up.
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
    /// Every session's time factor ([`InTurnProfile::session_time_factors`](crate::InTurnProfile::session_time_factors)): above 1 when the
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
    /// Measured steps per plan at least ([`ValidationOptions::steps`](super::ValidationOptions::steps); a plan's
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

impl ValidatedPlan {
    /// `(predicted - measured) / measured` of the step time.
    pub fn time_error(&self) -> Option<f64> {
        let measured = self.plan.measured_step_seconds()?;
        (measured > 0.0).then(|| (self.plan.predicted.step_seconds - measured) / measured)
    }

    /// `(in-turn predicted - measured) / measured` of the step time: the error of the cost
    /// model with a profile measured in turns with the plans, when there is one.
    pub fn in_turn_time_error(&self) -> Option<f64> {
        let measured = self.plan.measured_step_seconds()?;
        let predicted = self.in_turn_predicted_step_seconds?;
        (measured > 0.0).then(|| (predicted - measured) / measured)
    }

    /// Half the range of the measured step times over their median, `(max - min) / (2 *
    /// median)`: how far single steps strayed, to judge a time error against.
    pub fn time_spread(&self) -> Option<f64> {
        let median = self.plan.measured_step_seconds()?;
        let (min, max) = range(&self.step_seconds);
        (median > 0.0 && min <= max).then(|| (max - min) / (2.0 * median))
    }

    /// `(predicted - measured) / measured` of the per-device peak memory, when measured.
    pub fn memory_error(&self) -> Option<f64> {
        let measured = self.plan.measured_peak_bytes_per_device()? as f64;
        (measured > 0.0)
            .then(|| (self.plan.predicted.peak_bytes_per_device as f64 - measured) / measured)
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

pub(super) fn median(mut values: Vec<f64>) -> Option<f64> {
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

    /// Copies the measurements of every validated plan into the plans of `report` with the
    /// same layout (its `best` and `candidates`).
    pub fn apply_to(&self, report: &mut PlanReport) {
        for validated in &self.plans {
            let layout = &validated.plan.layout;
            for plan in report
                .candidates
                .iter_mut()
                .chain(std::iter::once(&mut report.best))
            {
                if plan.layout == *layout {
                    plan.measured = validated.plan.measured;
                }
            }
        }
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
            .any(|p| p.plan.measured_peak_bytes_per_device().is_some())
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
                p.layout.pp,
                p.layout.cp,
                p.layout.dp,
                p.layout.micro_batches,
                p.layout.stage_layers
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
                p.predicted.step_seconds,
                p.measured_step_seconds()
                    .map_or("-".to_string(), |s| format!("{s:.3}")),
                row.time_spread()
                    .map_or("-".to_string(), |s| format!("±{:.0}%", 100.0 * s)),
                percent(row.time_error()),
                format_bytes(p.predicted.peak_bytes_per_device),
                p.measured_peak_bytes_per_device()
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

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_planner::{Measurement, ParallelConfig, PassRatios, Prediction};

    /// A validated plan predicted at `predicted` seconds whose measured steps took `steps`
    /// (median `measured`).
    fn validated(predicted: f64, measured: f64, steps: Vec<f64>) -> ValidatedPlan {
        ValidatedPlan {
            plan: Plan {
                measured: Some(Measurement {
                    step_seconds: measured,
                    peak_bytes_per_device: None,
                }),
                ..Plan::predicted(
                    ParallelConfig::uniform(1, 1, 2, 1, 4).unwrap(),
                    Prediction {
                        step_seconds: predicted,
                        peak_bytes_per_device: 1,
                        bottleneck: String::new(),
                    },
                )
            },
            step_seconds: steps,
            step_times: Vec::new(),
            rank_peak_bytes: Vec::new(),
            predicted_index_bytes: 0,
            rank_index_bytes: Vec::new(),
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
}

//! The 1F1B pipeline schedule, simulated: the step time of `pp` stages whose forward and
//! backward passes take different times, run in the order the parallel runtime runs them
//! ([`one_forward_one_backward`]).
//!
//! Every stage works through its own action list; an action starts once the stage is free and
//! its input has arrived (the previous stage's activations for a forward pass, the next stage's
//! gradient for a backward pass). With equal stages this gives the textbook
//! `(m - 1) * max stage + sum of stages` ([`pipeline_seconds`](crate::comm::pipeline_seconds));
//! with unequal forward and backward times it follows the schedule's real waits.
//!
//! **Backward passes that wait for each other** ([`BackwardOverlap::WaitsForOthers`]). The
//! parallel runtime runs the ranks of a machine as threads of one process. Burn 0.21's autodiff
//! ends every backward pass with a sweep that locks every autodiff graph of the process, while a
//! backward pass holds its own graph's lock as long as it computes. So a stage whose backward
//! pass ends while another stage's is still computing cannot return before that one ends.
//! On CPU workers, where the computation happens under the lock, this is what the runtime does
//! and what the simulation then models; GPU backends hold the lock only while queueing
//! kernels. (Burn's upstream fix, a sweep that skips locked graphs, came after 0.21.)

use megagraph_parallel::{PipelineAction, one_forward_one_backward};

/// Seconds of one micro-batch's forward and backward pass on one stage, each including the
/// transfer the stage makes at its end (activations forward, gradients backward).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StagePass {
    /// Forward pass seconds.
    pub forward: f64,
    /// Backward pass seconds.
    pub backward: f64,
}

impl StagePass {
    /// Forward plus backward seconds.
    pub fn total(&self) -> f64 {
        self.forward + self.backward
    }
}

/// Whether a stage's backward pass may end while another stage's is running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackwardOverlap {
    /// Backward passes of different stages are independent.
    #[default]
    Independent,
    /// A backward pass that ends while another stage's backward pass computes ends only when
    /// that one does (stages in one process on Burn 0.21's autodiff, CPU workers).
    WaitsForOthers,
}

/// Seconds from the first forward pass to the last backward pass of a 1F1B pipeline of
/// `micro_batches` micro-batches whose stages take `stages` per micro-batch.
///
/// 0 when there are no stages or no micro-batches.
pub fn one_forward_one_backward_seconds(
    stages: &[StagePass],
    micro_batches: usize,
    overlap: BackwardOverlap,
) -> f64 {
    let pp = stages.len();
    if pp == 0 || micro_batches == 0 {
        return 0.0;
    }
    let schedules: Vec<Vec<PipelineAction>> = (0..pp)
        .map(|stage| one_forward_one_backward(stage, pp, micro_batches))
        .collect();
    // when each stage's forward / backward of each micro-batch ended (NaN: not yet)
    let mut forward_end = vec![vec![f64::NAN; micro_batches]; pp];
    let mut backward_end = vec![vec![f64::NAN; micro_batches]; pp];
    let mut next = vec![0usize; pp];
    let mut free = vec![0.0f64; pp];
    // a stage's backward pass whose computation is under way: (micro-batch, computed at)
    let mut pending: Vec<Option<(usize, f64)>> = vec![None; pp];
    // backward computations started so far: (stage, start, end of computation)
    let mut backward_runs: Vec<(usize, f64, f64)> = Vec::new();
    loop {
        // the ready action that starts first (ties: the lower stage)
        let mut first_start: Option<(f64, usize)> = None;
        for stage in (0..pp).filter(|&stage| pending[stage].is_none()) {
            let Some(&action) = schedules[stage].get(next[stage]) else {
                continue;
            };
            let input = match action {
                PipelineAction::Forward(micro) if stage > 0 => forward_end[stage - 1][micro],
                PipelineAction::Backward(micro) if stage + 1 < pp => backward_end[stage + 1][micro],
                _ => 0.0,
            };
            if input.is_nan() {
                continue;
            }
            let start = free[stage].max(input);
            if first_start.is_none_or(|(earliest, _)| start < earliest) {
                first_start = Some((start, stage));
            }
        }
        // the backward computation that finishes first
        let first_computed = (0..pp)
            .filter_map(|stage| pending[stage].map(|(_, computed)| (computed, stage)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        // every action that starts before a computation ends is placed before that end is
        // settled, so the other backward passes running at its end are all known
        let start_next = match (first_start, first_computed) {
            (Some((start, stage)), computed) if computed.is_none_or(|(at, _)| start < at) => {
                Some((start, stage))
            }
            _ => None,
        };
        match (start_next, first_computed) {
            (Some((start, stage)), _) => {
                let action = schedules[stage][next[stage]];
                next[stage] += 1;
                match action {
                    PipelineAction::Forward(micro) => {
                        let end = start + stages[stage].forward;
                        forward_end[stage][micro] = end;
                        free[stage] = end;
                    }
                    PipelineAction::Backward(micro) => {
                        let computed = start + stages[stage].backward;
                        backward_runs.push((stage, start, computed));
                        pending[stage] = Some((micro, computed));
                    }
                }
            }
            (_, Some((computed, stage))) => {
                let end = match overlap {
                    BackwardOverlap::Independent => computed,
                    BackwardOverlap::WaitsForOthers => backward_runs
                        .iter()
                        .filter(|&&(other, from, to)| {
                            other != stage && from < computed && to > computed
                        })
                        .map(|&(_, _, to)| to)
                        .fold(computed, f64::max),
                };
                if let Some((micro, _)) = pending[stage].take() {
                    backward_end[stage][micro] = end;
                }
                free[stage] = end;
            }
            (None, None) => break,
        }
    }
    free.into_iter().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::pipeline_seconds;

    fn pass(forward: f64, backward: f64) -> StagePass {
        StagePass { forward, backward }
    }

    #[test]
    fn equal_stages_give_the_textbook_formula() {
        for (pp, m) in [(1, 1), (1, 5), (2, 1), (2, 4), (3, 8), (4, 4), (4, 2)] {
            let stages = vec![pass(1.0, 2.0); pp];
            let simulated =
                one_forward_one_backward_seconds(&stages, m, BackwardOverlap::Independent);
            let totals: Vec<f64> = stages.iter().map(StagePass::total).collect();
            let formula = pipeline_seconds(&totals, m);
            assert!(
                (simulated - formula).abs() < 1e-12,
                "pp {pp} m {m}: {simulated} vs {formula}"
            );
        }
    }

    #[test]
    fn one_stage_is_the_sum_of_its_passes() {
        let simulated =
            one_forward_one_backward_seconds(&[pass(0.5, 1.5)], 3, BackwardOverlap::WaitsForOthers);
        assert!((simulated - 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_slow_stage_sets_the_pace() {
        // stage 1 (3 s a micro-batch) is the bottleneck: 4 of its micro-batches plus stage 0's
        // first forward and last backward
        let stages = [pass(0.25, 0.5), pass(1.0, 2.0)];
        let simulated = one_forward_one_backward_seconds(&stages, 4, BackwardOverlap::Independent);
        assert!(
            (simulated - (0.25 + 4.0 * 3.0 + 0.5)).abs() < 1e-12,
            "{simulated}"
        );
    }

    #[test]
    fn waiting_backward_passes_end_with_the_other_stage() {
        // Two stages, forward 1 s, backward 2 s, 2 micro-batches. Independent: stage 1 runs
        // F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; stage 0 runs F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9].
        let stages = [pass(1.0, 2.0), pass(1.0, 2.0)];
        let independent =
            one_forward_one_backward_seconds(&stages, 2, BackwardOverlap::Independent);
        assert!((independent - 9.0).abs() < 1e-12, "{independent}");
        // Waiting: stage 1's B1 starts at 5 while stage 0's B0 computes until 6, and ends at 7,
        // after it: nothing changes. Stage 0's B0 ends at 6 while stage 1's B1 computes until
        // 7: it ends at 7, and B1 then runs [7,9].
        let waiting = one_forward_one_backward_seconds(&stages, 2, BackwardOverlap::WaitsForOthers);
        assert!((waiting - 9.0).abs() < 1e-12, "{waiting}");
        // With 3 micro-batches, independent: stage 0 runs B0 [4,6] F2 [6,7] B1 [7,9] B2
        // [10,12]. Waiting: stage 0's B0 waits for stage 1's B1 [5,7], so F2 runs [7,8];
        // stage 1 runs F2 [8,9] B2 [9,11]; stage 0's B1 [8,10] waits for B2 until 11, and its
        // B2 runs [11,13].
        let independent =
            one_forward_one_backward_seconds(&stages, 3, BackwardOverlap::Independent);
        let waiting = one_forward_one_backward_seconds(&stages, 3, BackwardOverlap::WaitsForOthers);
        assert!((independent - 12.0).abs() < 1e-12, "{independent}");
        assert!((waiting - 13.0).abs() < 1e-12, "{waiting}");
    }

    #[test]
    fn nothing_to_run_takes_no_time() {
        assert_eq!(
            one_forward_one_backward_seconds(&[], 4, BackwardOverlap::Independent),
            0.0
        );
        assert_eq!(
            one_forward_one_backward_seconds(&[pass(1.0, 1.0)], 0, BackwardOverlap::Independent),
            0.0
        );
    }
}

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
//! **Stages that share a machine** ([`MachineSharing`]). CPU workers share one machine's memory
//! bandwidth and caches: a pass runs faster while the other stages wait than its profiled time,
//! measured with every rank computing. The simulation runs each pass at the rate its duration
//! under the stages computing at that moment gives, from event to event.
//!
//! **Backward passes that wait for each other** ([`BackwardOverlap::WaitsForOthers`]). A
//! runtime that runs the ranks of a machine as threads of one process on Burn 0.21.0's autodiff
//! as published ends every backward pass with a sweep that locks every autodiff graph of the
//! process, while a backward pass holds its own graph's lock as long as it computes. So a stage
//! whose backward pass ends while another stage's is still computing cannot return before that
//! one ends (on CPU workers, where the computation happens under the lock; GPU backends hold it
//! only while queueing kernels). megagraph builds with a patched burn-autodiff whose sweep skips
//! locked graphs (`vendor/burn-autodiff/PATCHES.md`, upstream's later fix), so its own ranks'
//! backward passes are independent; the simulation models the waits for clusters that declare
//! them.

use crate::sharing::MachineSharing;
use crate::stage_pass::StagePass;
use megagraph_layout::{PipelineAction, one_forward_one_backward};

/// Whether a stage's backward pass may end while another stage's is running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackwardOverlap {
    /// Backward passes of different stages are independent.
    #[default]
    Independent,
    /// A backward pass that ends while another stage's backward pass computes ends only when
    /// that one does (stages in one process on Burn 0.21.0's unpatched autodiff, CPU workers).
    WaitsForOthers,
}

/// Seconds from the first forward pass to the last backward pass of a 1F1B pipeline of
/// `micro_batches` micro-batches whose stages take `stages` per micro-batch, on machines shared
/// as `sharing` says (a pass runs faster while fewer ranks of its machine compute;
/// [`MachineSharing::dedicated`] for devices of their own).
///
/// The simulation advances from event to event (a pass's computation ending): between two
/// events the set of computing stages is fixed, so every running pass progresses at the rate its
/// duration under that set gives.
///
/// 0 when there are no stages or no micro-batches.
pub fn one_forward_one_backward_seconds(
    stages: &[StagePass],
    micro_batches: usize,
    overlap: BackwardOverlap,
    sharing: &MachineSharing,
) -> f64 {
    let pp = stages.len();
    if pp == 0 || micro_batches == 0 {
        return 0.0;
    }
    let schedules: Vec<Vec<PipelineAction>> = (0..pp)
        .map(|stage| one_forward_one_backward(stage, pp, micro_batches))
        .collect();
    let solo = |stage: usize| sharing.solo.get(stage).copied().unwrap_or(stages[stage]);
    // when each stage's forward / backward of each micro-batch ended (NaN: not yet)
    let mut forward_end = vec![vec![f64::NAN; micro_batches]; pp];
    let mut backward_end = vec![vec![f64::NAN; micro_batches]; pp];
    let mut next = vec![0usize; pp];
    // the action each stage computes and the fraction of it still to compute
    let mut running: Vec<Option<(PipelineAction, f64)>> = vec![None; pp];
    // a backward pass computed but waiting for other stages' backward computations to end:
    // its micro-batch and those stages
    let mut waiting: Vec<Option<(usize, Vec<usize>)>> = vec![None; pp];
    let mut busy = vec![false; pp];
    let mut seconds = vec![0.0f64; pp];
    let mut finished = Vec::with_capacity(pp);
    let mut now = 0.0f64;
    loop {
        // every stage that is free and has its input starts its next action
        for stage in 0..pp {
            if running[stage].is_some() || waiting[stage].is_some() {
                continue;
            }
            let Some(&action) = schedules[stage].get(next[stage]) else {
                continue;
            };
            let input = match action {
                PipelineAction::Forward(micro) if stage > 0 => forward_end[stage - 1][micro],
                PipelineAction::Backward(micro) if stage + 1 < pp => backward_end[stage + 1][micro],
                _ => now,
            };
            if !input.is_nan() {
                next[stage] += 1;
                running[stage] = Some((action, 1.0));
            }
        }
        for stage in 0..pp {
            busy[stage] = running[stage].is_some();
        }
        // every running pass's duration while exactly these stages compute
        let mut step = f64::INFINITY;
        for stage in 0..pp {
            if let Some((action, left)) = running[stage] {
                let (concurrent, alone) = match action {
                    PipelineAction::Forward(_) => (stages[stage].forward, solo(stage).forward),
                    PipelineAction::Backward(_) => (stages[stage].backward, solo(stage).backward),
                };
                seconds[stage] = sharing.pass_seconds(stage, concurrent, alone, &busy);
                step = step.min(left * seconds[stage]);
            }
        }
        if !step.is_finite() {
            break;
        }
        now += step;
        finished.clear();
        for stage in 0..pp {
            if let Some((action, left)) = running[stage] {
                let remaining = left * seconds[stage] - step;
                if remaining <= 1e-12 * step.max(f64::MIN_POSITIVE) {
                    finished.push((stage, action));
                    running[stage] = None;
                } else {
                    running[stage] = Some((action, remaining / seconds[stage]));
                }
            }
        }
        // backward passes waiting for a computation that just ended may end
        for stage in 0..pp {
            if let Some((micro, others)) = &mut waiting[stage] {
                others.retain(|other| !finished.iter().any(|&(done, _)| done == *other));
                if others.is_empty() {
                    backward_end[stage][*micro] = now;
                    waiting[stage] = None;
                }
            }
        }
        for &(stage, action) in &finished {
            match action {
                PipelineAction::Forward(micro) => forward_end[stage][micro] = now,
                PipelineAction::Backward(micro) => {
                    // the backward computations still running when this one ends
                    let others: Vec<usize> = match overlap {
                        BackwardOverlap::Independent => Vec::new(),
                        BackwardOverlap::WaitsForOthers => (0..pp)
                            .filter(|&other| {
                                matches!(running[other], Some((PipelineAction::Backward(_), _)))
                            })
                            .collect(),
                    };
                    if others.is_empty() {
                        backward_end[stage][micro] = now;
                    } else {
                        waiting[stage] = Some((micro, others));
                    }
                }
            }
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_layout::CpMode;
    use crate::comm::pipeline_seconds;

    fn pass(forward: f64, backward: f64) -> StagePass {
        StagePass { forward, backward }
    }

    #[test]
    fn equal_stages_give_the_textbook_formula() {
        for (pp, m) in [(1, 1), (1, 5), (2, 1), (2, 4), (3, 8), (4, 4), (4, 2)] {
            let stages = vec![pass(1.0, 2.0); pp];
            let simulated = one_forward_one_backward_seconds(
                &stages,
                m,
                BackwardOverlap::Independent,
                &MachineSharing::dedicated(),
            );
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
        let simulated = one_forward_one_backward_seconds(
            &[pass(0.5, 1.5)],
            3,
            BackwardOverlap::WaitsForOthers,
            &MachineSharing::dedicated(),
        );
        assert!((simulated - 6.0).abs() < 1e-12);
    }

    #[test]
    fn a_slow_stage_sets_the_pace() {
        // stage 1 (3 s a micro-batch) is the bottleneck: 4 of its micro-batches plus stage 0's
        // first forward and last backward
        let stages = [pass(0.25, 0.5), pass(1.0, 2.0)];
        let simulated = one_forward_one_backward_seconds(
            &stages,
            4,
            BackwardOverlap::Independent,
            &MachineSharing::dedicated(),
        );
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
        let independent = one_forward_one_backward_seconds(
            &stages,
            2,
            BackwardOverlap::Independent,
            &MachineSharing::dedicated(),
        );
        assert!((independent - 9.0).abs() < 1e-12, "{independent}");
        // Waiting: stage 1's B1 starts at 5 while stage 0's B0 computes until 6, and ends at 7,
        // after it: nothing changes. Stage 0's B0 ends at 6 while stage 1's B1 computes until
        // 7: it ends at 7, and B1 then runs [7,9].
        let waiting = one_forward_one_backward_seconds(
            &stages,
            2,
            BackwardOverlap::WaitsForOthers,
            &MachineSharing::dedicated(),
        );
        assert!((waiting - 9.0).abs() < 1e-12, "{waiting}");
        // With 3 micro-batches, independent: stage 0 runs B0 [4,6] F2 [6,7] B1 [7,9] B2
        // [10,12]. Waiting: stage 0's B0 waits for stage 1's B1 [5,7], so F2 runs [7,8];
        // stage 1 runs F2 [8,9] B2 [9,11]; stage 0's B1 [8,10] waits for B2 until 11, and its
        // B2 runs [11,13].
        let independent = one_forward_one_backward_seconds(
            &stages,
            3,
            BackwardOverlap::Independent,
            &MachineSharing::dedicated(),
        );
        let waiting = one_forward_one_backward_seconds(
            &stages,
            3,
            BackwardOverlap::WaitsForOthers,
            &MachineSharing::dedicated(),
        );
        assert!((independent - 12.0).abs() < 1e-12, "{independent}");
        assert!((waiting - 13.0).abs() < 1e-12, "{waiting}");
    }

    /// Two stages of one machine of 2 ranks, whose passes take `solo` times their own alone.
    fn two_sharing(stages: &[StagePass], solo: f64) -> MachineSharing {
        let mesh = crate::mesh::CandidateMesh {
            pp: 2,
            cp: 1,
            dp: 1,
            micro_batches: 1,
            cp_mode: CpMode::Ring,
        };
        let alone = stages
            .iter()
            .map(|pass| StagePass {
                forward: solo * pass.forward,
                backward: solo * pass.backward,
            })
            .collect();
        MachineSharing::on_machines(&mesh, 2, alone, 2)
    }

    #[test]
    fn a_stage_computing_alone_runs_at_its_solo_speed() {
        // Forward 1 s, backward 2 s with both computing, half alone; 2 micro-batches.
        // Stage 0 F0 alone [0, 0.5]; F1 with stage 1's F0 [0.5, 1.5]; stage 1 B0 alone
        // [1.5, 2.5]; then stage 0 B0 (2 s together) and stage 1 F1 (1 s) start at 2.5: F1 ends
        // at 3.5 with B0 half done; stage 1 B1 starts; B0 ends at 4.5 with B1 half done; B1
        // alone ends at 5; stage 0 B1 alone [5, 6].
        let stages = [pass(1.0, 2.0), pass(1.0, 2.0)];
        let sharing = two_sharing(&stages, 0.5);
        let shared =
            one_forward_one_backward_seconds(&stages, 2, BackwardOverlap::Independent, &sharing);
        assert!((shared - 6.0).abs() < 1e-12, "{shared}");
        // Waiting: stage 0's B0 ends its computation at 4.5 while stage 1's B1 computes, and
        // waits without computing, so B1 finishes alone at 5, as before; a waiting stage counted
        // as busy would have made it 5.5 and the step 6.5.
        let waiting =
            one_forward_one_backward_seconds(&stages, 2, BackwardOverlap::WaitsForOthers, &sharing);
        assert!((waiting - 6.0).abs() < 1e-12, "{waiting}");
    }

    #[test]
    fn solo_times_equal_to_the_concurrent_ones_change_nothing() {
        let stages = [pass(0.7, 1.9), pass(1.3, 2.1)];
        for m in [1, 2, 3, 8] {
            for overlap in [
                BackwardOverlap::Independent,
                BackwardOverlap::WaitsForOthers,
            ] {
                let dedicated = one_forward_one_backward_seconds(
                    &stages,
                    m,
                    overlap,
                    &MachineSharing::dedicated(),
                );
                let same = one_forward_one_backward_seconds(
                    &stages,
                    m,
                    overlap,
                    &two_sharing(&stages, 1.0),
                );
                assert!(
                    (dedicated - same).abs() < 1e-12,
                    "m {m}: {dedicated} vs {same}"
                );
                let faster = one_forward_one_backward_seconds(
                    &stages,
                    m,
                    overlap,
                    &two_sharing(&stages, 0.8),
                );
                assert!(faster < dedicated, "m {m}: {faster} vs {dedicated}");
                // never faster than every pass alone
                let alone = one_forward_one_backward_seconds(
                    &[pass(0.56, 1.52), pass(1.04, 1.68)],
                    m,
                    overlap,
                    &MachineSharing::dedicated(),
                );
                assert!(faster >= alone - 1e-12, "m {m}: {faster} vs {alone}");
            }
        }
    }

    #[test]
    fn nothing_to_run_takes_no_time() {
        assert_eq!(
            one_forward_one_backward_seconds(
                &[],
                4,
                BackwardOverlap::Independent,
                &MachineSharing::dedicated()
            ),
            0.0
        );
        assert_eq!(
            one_forward_one_backward_seconds(
                &[pass(1.0, 1.0)],
                0,
                BackwardOverlap::Independent,
                &MachineSharing::dedicated()
            ),
            0.0
        );
    }
}

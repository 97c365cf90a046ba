//! Ranks that share one machine slow each other down. [`SoloRatios`](crate::SoloRatios), measured by the profiler,
//! say how much faster each part runs when its rank computes alone on the machine;
//! [`MachineSharing`] turns them into the time of a pipeline pass given which stages compute at
//! the same moment ([`crate::schedule`]).
//!
//! CPU workers are threads of one machine: they share its memory bandwidth and last-level
//! cache, and a shared host schedules them. A profile measured with `concurrency = c` copies
//! times every part with all `c` busy, as the ranks of a data- or context-parallel group are.
//! In a pipeline a stage often computes while the other stages wait (for its activations, or
//! on Burn 0.21's autodiff lock), and then runs faster. With `b` ranks of its machine computing,
//! a pass takes
//!
//! ```text
//! solo + (concurrent - solo) * clamp((b - 1) / (c - 1), 0, 1)
//! ```
//!
//! GPU ranks own their devices: their profiles carry no ratios, and passes keep their times.

use crate::mesh::CandidateMesh;
use crate::stage_pass::StagePass;

/// How the stages of a pipeline share machines: each stage's passes alone, and which stages'
/// ranks compute on each stage's machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineSharing {
    /// Each stage's passes when no other rank of its machine computes; empty: every rank has
    /// its own device and passes keep their times.
    pub solo: Vec<StagePass>,
    /// `co_located[s][t]`: ranks of stage `t` on the machine of stage `s`'s first rank.
    pub co_located: Vec<Vec<usize>>,
    /// Ranks computing at once in the passes' own (concurrent) times: the profile's copies.
    pub copies: usize,
}

impl MachineSharing {
    /// Every rank on its own device (GPUs): no pass depends on the others.
    pub fn dedicated() -> Self {
        Self::default()
    }

    /// Stages of `mesh` placed on machines of `devices_per_node` ranks each (ranks numbered
    /// machine by machine) whose passes take `solo` alone and their own times with `copies`
    /// ranks of their machine computing.
    pub fn on_machines(
        mesh: &CandidateMesh,
        devices_per_node: usize,
        solo: Vec<StagePass>,
        copies: usize,
    ) -> Self {
        let per_node = devices_per_node.max(1);
        let node = |rank: usize| rank / per_node;
        let co_located = (0..mesh.pp)
            .map(|stage| {
                let home = node(mesh.rank(stage, 0, 0));
                (0..mesh.pp)
                    .map(|other| {
                        (0..mesh.dp)
                            .flat_map(|replica| (0..mesh.cp).map(move |block| (replica, block)))
                            .filter(|&(replica, block)| {
                                node(mesh.rank(other, replica, block)) == home
                            })
                            .count()
                    })
                    .collect()
            })
            .collect();
        Self {
            solo,
            co_located,
            copies,
        }
    }

    /// Whether some pass runs faster when fewer ranks compute.
    pub fn is_shared(&self) -> bool {
        !self.solo.is_empty() && self.copies > 1
    }

    /// Seconds of a pass of `stage` that takes `concurrent` with all copies computing and `solo`
    /// alone, while the stages marked in `busy` compute (`stage` among them).
    pub fn pass_seconds(&self, stage: usize, concurrent: f64, solo: f64, busy: &[bool]) -> f64 {
        let Some(co_located) = self.co_located.get(stage).filter(|_| self.is_shared()) else {
            return concurrent;
        };
        let ranks: usize = co_located
            .iter()
            .zip(busy)
            .filter(|&(_, &busy)| busy)
            .map(|(&ranks, _)| ranks)
            .sum();
        let share = (ranks.max(1) - 1) as f64 / (self.copies - 1) as f64;
        solo + (concurrent - solo) * share.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_layout::CpMode;

    fn mesh(pp: usize, cp: usize, dp: usize) -> CandidateMesh {
        CandidateMesh {
            pp,
            cp,
            dp,
            micro_batches: 1,
            cp_mode: CpMode::Ring,
        }
    }

    #[test]
    fn stages_count_their_ranks_on_each_machine() {
        // pp = 2, cp = 2 on one machine of 4: every stage sees both stages' 2 ranks
        let one = MachineSharing::on_machines(&mesh(2, 2, 1), 4, vec![], 4);
        assert_eq!(one.co_located, vec![vec![2, 2], vec![2, 2]]);
        // pp = 4 on 2 machines of 2: stages 0-1 on one, 2-3 on the other
        let two = MachineSharing::on_machines(&mesh(4, 1, 1), 2, vec![], 2);
        assert_eq!(
            two.co_located,
            vec![
                vec![1, 1, 0, 0],
                vec![1, 1, 0, 0],
                vec![0, 0, 1, 1],
                vec![0, 0, 1, 1]
            ]
        );
    }

    #[test]
    fn a_pass_runs_between_its_solo_and_concurrent_times() {
        let solo = vec![StagePass::default(); 2];
        let two = MachineSharing::on_machines(&mesh(2, 1, 1), 2, solo.clone(), 2);
        assert_eq!(two.pass_seconds(0, 10.0, 8.0, &[true, false]), 8.0);
        assert_eq!(two.pass_seconds(1, 10.0, 8.0, &[true, true]), 10.0);
        // 4 ranks, the profile's 4 copies: 2 of them busy is a third of the way
        let four = MachineSharing::on_machines(&mesh(2, 2, 1), 4, solo, 4);
        let third = four.pass_seconds(0, 10.0, 7.0, &[true, false]);
        assert!((third - 8.0).abs() < 1e-12, "{third}");
        assert_eq!(four.pass_seconds(0, 10.0, 7.0, &[true, true]), 10.0);
        // dedicated devices keep their times
        assert_eq!(
            MachineSharing::dedicated().pass_seconds(0, 10.0, 7.0, &[true, false]),
            10.0
        );
    }
}

//! [`EpochPlan`]: which events each worker trains on at each step of an epoch, and when the
//! workers reconcile their memory. A pure function of the scheme and the split, computed once
//! per epoch before the workers start.

use std::ops::Range;

use megagraph_graph::temporal::WindowShards;

use crate::batches::{Phase, batches};
use crate::scheme::TemporalScheme;

/// One worker's batch at one step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkerBatch {
    /// The events, in time order.
    pub events: Vec<usize>,
    /// The batch's index among the epoch's batches: the key of its negatives and sampling.
    pub index: usize,
    /// The phase its negatives are drawn for (epoch parallelism gives each worker its own).
    pub phase: Phase,
}

/// One step of all workers: one optimizer step on every worker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedStep {
    /// Each worker's batch (`None`: the worker only joins the all-reduce).
    pub batches: Vec<Option<WorkerBatch>>,
    /// Whether the workers reconcile their memory after this step.
    pub sync_after: bool,
}

/// The steps of one epoch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EpochPlan {
    /// The steps in order.
    pub steps: Vec<PlannedStep>,
    /// The worker whose memory leads into validation.
    pub last_worker: usize,
}

/// Offset of the negative keys of epoch parallelism's workers past the first (far above any
/// real epoch number).
const EPOCH_KEY_STRIDE: usize = 1 << 20;

impl EpochPlan {
    /// The plan of training epoch `epoch` over the events `train` for `workers` workers with
    /// batches of `batch_size` events; `shards` are DepBloom's windows (required by it only).
    pub fn new(
        scheme: TemporalScheme,
        workers: usize,
        train: Range<usize>,
        batch_size: usize,
        shards: Option<&WindowShards>,
        epoch: usize,
    ) -> Self {
        let phase = Phase::Train(epoch);
        let mut steps = Vec::new();
        let mut last_worker = 0;
        let batch = |events: Vec<usize>, index: usize| WorkerBatch { events, index, phase };
        match scheme {
            TemporalScheme::Minibatch => {
                for (g, global) in batches(train, batch_size * workers).into_iter().enumerate() {
                    let parts = (0..workers)
                        .map(|w| {
                            let start = (global.start + w * batch_size).min(global.end);
                            let end = (start + batch_size).min(global.end);
                            (start < end).then(|| batch((start..end).collect(), g * workers + w))
                        })
                        .collect();
                    steps.push(PlannedStep {
                        batches: parts,
                        sync_after: true,
                    });
                }
            }
            TemporalScheme::Epoch => {
                for (index, events) in batches(train, batch_size).into_iter().enumerate() {
                    let parts = (0..workers)
                        .map(|w| {
                            Some(WorkerBatch {
                                events: events.clone().collect(),
                                index,
                                phase: Phase::Train(epoch + w * EPOCH_KEY_STRIDE),
                            })
                        })
                        .collect();
                    steps.push(PlannedStep {
                        batches: parts,
                        sync_after: true,
                    });
                }
            }
            TemporalScheme::Memory => {
                let all = batches(train, batch_size);
                let per = all.len().div_ceil(workers).max(1);
                last_worker = (all.len().max(1) - 1) / per;
                for s in 0..per {
                    let parts = (0..workers)
                        .map(|w| all.get(w * per + s).map(|r| batch(r.clone().collect(), w * per + s)))
                        .collect();
                    steps.push(PlannedStep {
                        batches: parts,
                        sync_after: false,
                    });
                }
            }
            TemporalScheme::Depbloom => {
                let mut base = 0;
                for window in shards.map(|s| s.windows.as_slice()).unwrap_or_default() {
                    let end = window.end.min(train.end);
                    let start = window.start.max(train.start);
                    if start >= end {
                        continue;
                    }
                    let shard_batches: Vec<Vec<Vec<usize>>> = (0..workers)
                        .map(|w| {
                            let events: Vec<usize> = (start..end)
                                .filter(|&e| window.event_shard[e - window.start] as usize == w)
                                .collect();
                            events.chunks(batch_size).map(<[usize]>::to_vec).collect()
                        })
                        .collect();
                    let count = shard_batches.iter().map(Vec::len).max().unwrap_or(0);
                    for s in 0..count {
                        let parts = (0..workers)
                            .map(|w| {
                                shard_batches[w]
                                    .get(s)
                                    .map(|events| batch(events.clone(), base + s * workers + w))
                            })
                            .collect();
                        steps.push(PlannedStep {
                            batches: parts,
                            sync_after: s + 1 == count,
                        });
                    }
                    base += count * workers;
                }
            }
        }
        Self { steps, last_worker }
    }

    /// Events each worker trains on in this epoch.
    pub fn events_per_worker(&self) -> Vec<usize> {
        let workers = self.steps.first().map_or(0, |s| s.batches.len());
        (0..workers)
            .map(|w| {
                self.steps
                    .iter()
                    .filter_map(|s| s.batches[w].as_ref())
                    .map(|b| b.events.len())
                    .sum()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_graph::temporal::{InteractionConfig, ShardStrategy};

    fn covered(plan: &EpochPlan) -> Vec<usize> {
        let mut events: Vec<usize> = plan
            .steps
            .iter()
            .flat_map(|s| s.batches.iter().flatten().flat_map(|b| b.events.clone()))
            .collect();
        events.sort_unstable();
        events
    }

    #[test]
    fn minibatch_cuts_global_batches_into_consecutive_sub_batches() {
        let plan = EpochPlan::new(TemporalScheme::Minibatch, 2, 0..7, 2, None, 1);
        let parts: Vec<Vec<Option<Vec<usize>>>> = plan
            .steps
            .iter()
            .map(|s| s.batches.iter().map(|b| b.as_ref().map(|b| b.events.clone())).collect())
            .collect();
        assert_eq!(
            parts,
            vec![
                vec![Some(vec![0, 1]), Some(vec![2, 3])],
                vec![Some(vec![4, 5]), Some(vec![6])]
            ]
        );
        assert!(plan.steps.iter().all(|s| s.sync_after));
        assert_eq!(plan.events_per_worker(), vec![4, 3]);
    }

    #[test]
    fn memory_segments_cover_the_epoch_once_and_the_last_segment_leads_on() {
        let plan = EpochPlan::new(TemporalScheme::Memory, 3, 0..10, 2, None, 1);
        assert_eq!(covered(&plan), (0..10).collect::<Vec<_>>());
        assert_eq!(plan.last_worker, 2);
        assert!(plan.steps.iter().all(|s| !s.sync_after));
        // worker 1's segment starts where worker 0's ends
        assert_eq!(plan.steps[0].batches[1].as_ref().map(|b| b.events[0]), Some(4));
    }

    #[test]
    fn epoch_parallelism_repeats_each_batch_with_other_negatives() {
        let plan = EpochPlan::new(TemporalScheme::Epoch, 2, 0..4, 2, None, 3);
        let step = &plan.steps[1];
        let (a, b) = (step.batches[0].as_ref(), step.batches[1].as_ref());
        assert_eq!(a.map(|b| &b.events), b.map(|b| &b.events));
        assert_ne!(a.map(|b| b.phase.negative_key()), b.map(|b| b.phase.negative_key()));
        assert_eq!(a.map(|b| b.phase.negative_key()), Some(3));
    }

    #[test]
    fn depbloom_runs_each_shard_in_time_order_and_syncs_at_window_ends() {
        let stream = InteractionConfig {
            num_events: 300,
            ..Default::default()
        }
        .generate()
        .unwrap_or_else(|err| panic!("{err}"))
        .events;
        let shards =
            WindowShards::build(&stream, 2, 100, ShardStrategy::Topology, 0).unwrap_or_else(|err| panic!("{err}"));
        let plan = EpochPlan::new(TemporalScheme::Depbloom, 2, 0..250, 16, Some(&shards), 1);
        assert_eq!(covered(&plan), (0..250).collect::<Vec<_>>());
        for step in &plan.steps {
            for (w, batch) in step.batches.iter().enumerate() {
                let Some(batch) = batch else { continue };
                assert!(batch.events.windows(2).all(|p| p[0] < p[1]));
                let window = &shards.windows[batch.events[0] / 100];
                assert!(
                    batch
                        .events
                        .iter()
                        .all(|&e| window.event_shard[e - window.start] as usize == w)
                );
            }
        }
        assert_eq!(plan.steps.iter().filter(|s| s.sync_after).count(), 3);
        let mut indices: Vec<usize> = plan
            .steps
            .iter()
            .flat_map(|s| s.batches.iter().flatten().map(|b| b.index))
            .collect();
        let len = indices.len();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), len, "every batch has its own key");
    }
}

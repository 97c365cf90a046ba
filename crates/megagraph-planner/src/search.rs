//! [`search`]: every `pp x cp x dp` layout of the cluster's devices, every micro-batch count, and
//! for each the exact best layer split ([`optimal_partition`]) under the memory limit, ranked by
//! predicted step time into a [`PlanReport`].

use crate::cost::{CandidateCost, CostModel};
use crate::memory::{MemoryBreakdown, format_bytes};
use crate::mesh::CandidateMesh;
use crate::partition::optimal_partition;
use crate::plan::Plan;
use crate::report::{PlanReport, RejectReason, Rejected, SearchSetting};
use crate::cp_choice::explain_cp_mode;
use crate::search_options::SearchOptions;
use megagraph_layout::{CpMode, ParallelConfig, ParallelConfigError};
use std::time::Instant;

/// Why a search found no plan.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SearchError {
    /// No `pp x cp x dp` layout of the devices is valid for the model and workload.
    #[error("no pp x cp x dp layout of {devices} devices fits the workload ({} layouts tried); e.g. {example}", rejected.len())]
    NoValidLayout {
        /// Devices of the cluster.
        devices: usize,
        /// The first rejection's message.
        example: String,
        /// Every rejection.
        rejected: Vec<Rejected>,
    },
    /// Valid layouts exist but none fits in memory.
    #[error(
        "no plan fits in {} per device; closest: pp={} cp={} dp={} micro_batches={} needs {} on stage {}, {} over",
        format_bytes(*limit_bytes),
        closest.config.pp,
        closest.config.cp,
        closest.config.dp,
        closest.config.micro_batches,
        format_bytes(*needed_bytes),
        stage,
        format_bytes(needed_bytes.saturating_sub(*limit_bytes))
    )]
    NothingFits {
        /// The rejection with the smallest excess.
        closest: Box<Rejected>,
        /// Its fullest stage.
        stage: usize,
        /// What that stage needs per device.
        needed_bytes: u64,
        /// Usable bytes per device.
        limit_bytes: u64,
        /// Every rejection.
        rejected: Vec<Rejected>,
    },
}

/// The divisors of `n`, increasing.
pub(crate) fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|&d| n.is_multiple_of(d)).collect()
}

/// Searches every layout of `model`'s cluster (all its devices) and returns the ranked plans.
pub(crate) fn search(
    model: &CostModel,
    options: &SearchOptions,
) -> Result<PlanReport, SearchError> {
    let started = Instant::now();
    let cluster = model.cluster();
    let shape = model.shape();
    let workload = model.workload();
    let devices = cluster.devices();
    let layers = shape.layers;
    let limit = (cluster.memory_bytes_per_device as f64 * options.memory_fraction.clamp(0.0, 1.0))
        .floor() as u64;

    let mut candidates = Vec::new();
    let mut rejected = Vec::new();
    let mut any_valid_layout = false;
    for pp in divisors(devices) {
        for cp in divisors(devices / pp) {
            let dp = devices / (pp * cp);
            let layout = ParallelConfig::uniform(pp, cp, dp, 1, layers).and_then(|config| {
                config.validate(layers, workload.seq_len, workload.sequences_per_step)?;
                Ok(config)
            });
            if let Err(error) = layout {
                let stage_layers = ParallelConfig::uniform(pp, cp, dp, 1, layers)
                    .map(|c| c.stage_layers)
                    .unwrap_or_default();
                rejected.push(Rejected {
                    config: ParallelConfig {
                        pp,
                        cp,
                        dp,
                        micro_batches: 1,
                        stage_layers,
                        cp_mode: CpMode::Ring,
                    },
                    reason: RejectReason::Invalid { error },
                });
                continue;
            }
            let modes = match options.cp_mode {
                Some(mode) => vec![mode],
                None if cp > 1 => CpMode::ALL.to_vec(),
                None => vec![CpMode::Ring],
            };
            for cp_mode in modes {
                let ulysses_refusal = if cp_mode != CpMode::Ulysses || cp <= 1 {
                    None
                } else if !shape.heads.is_multiple_of(cp) {
                    Some(ParallelConfigError::HeadsNotMultipleOfContext {
                        heads: shape.heads,
                        cp,
                    })
                } else if shape.edge_feature_dim > 0 {
                    // the edge encoding's dense bias: the ring reads each rank's rows in place,
                    // Ulysses' all-to-all would have to send them
                    Some(ParallelConfigError::DenseBiasWithUlysses { cp })
                } else {
                    None
                };
                if let Some(error) = ulysses_refusal {
                    // tried only when asked for: then the layout is invalid
                    if options.cp_mode.is_some() {
                        let config = ParallelConfig::uniform(pp, cp, dp, 1, layers)
                            .map(|config| config.with_cp_mode(cp_mode))
                            .unwrap_or_else(|_| ParallelConfig::single_device(layers));
                        rejected.push(Rejected {
                            config,
                            reason: RejectReason::Invalid { error },
                        });
                    }
                    continue;
                }
                any_valid_layout = true;
                let per_replica = workload.sequences_per_step / dp;
                for micro_batches in divisors(per_replica)
                    .into_iter()
                    .filter(|&m| m <= options.max_micro_batches)
                {
                    let mesh = CandidateMesh {
                        pp,
                        cp,
                        dp,
                        micro_batches,
                        cp_mode,
                    };
                    match plan_mesh(&model.candidate(mesh), layers, limit) {
                        MeshOutcome::Planned(plan, memory) => candidates.push((plan, memory)),
                        MeshOutcome::Rejected(rejection) => rejected.push(rejection),
                    }
                }
            }
        }
    }

    candidates.sort_by(|a: &(Plan, Vec<MemoryBreakdown>), b| {
        a.0.predicted
            .step_seconds
            .total_cmp(&b.0.predicted.step_seconds)
            .then(
                a.0.predicted
                    .peak_bytes_per_device
                    .cmp(&b.0.predicted.peak_bytes_per_device),
            )
            .then(
                (
                    a.0.layout.pp,
                    a.0.layout.cp,
                    a.0.layout.dp,
                    a.0.layout.micro_batches,
                    a.0.layout.cp_mode,
                )
                    .cmp(&(
                        b.0.layout.pp,
                        b.0.layout.cp,
                        b.0.layout.dp,
                        b.0.layout.micro_batches,
                        b.0.layout.cp_mode,
                    )),
            )
    });
    // Among the plans about as fast as the fastest, the leanest goes first.
    if let Some(fastest) = candidates.first().map(|c| c.0.predicted.step_seconds) {
        let within = fastest * (1.0 + options.time_tolerance.max(0.0));
        let leanest = candidates
            .iter()
            .enumerate()
            .take_while(|(_, c)| c.0.predicted.step_seconds <= within)
            .min_by_key(|(_, c)| c.0.predicted.peak_bytes_per_device)
            .map(|(index, _)| index)
            .unwrap_or(0);
        let chosen = candidates.remove(leanest);
        candidates.insert(0, chosen);
    }
    let Some((best, best_memory)) = candidates.first().cloned() else {
        return Err(no_plan(devices, limit, any_valid_layout, rejected));
    };
    let cp_mode_reason = explain_cp_mode(model, options, &best, &candidates, &rejected);
    let search_seconds = started.elapsed().as_secs_f64();
    log::debug!(
        "searched {} candidates and {} rejections on {devices} devices in {search_seconds:.3} s",
        candidates.len(),
        rejected.len()
    );
    Ok(PlanReport {
        best,
        candidates: candidates.into_iter().map(|(plan, _)| plan).collect(),
        rejected,
        search_seconds,
        best_memory,
        cp_mode_reason,
        setting: SearchSetting {
            cluster: cluster.name.clone(),
            devices,
            memory_limit_bytes: limit,
            layers,
            seq_len: workload.seq_len,
            sequences_per_step: workload.sequences_per_step,
        },
    })
}

/// What became of one mesh.
enum MeshOutcome {
    /// Its best split, with the memory of each stage.
    Planned(Plan, Vec<MemoryBreakdown>),
    /// No split fits.
    Rejected(Rejected),
}

/// The best split of one mesh under the memory limit, or why there is none.
fn plan_mesh(cost: &CandidateCost, layers: usize, limit: u64) -> MeshOutcome {
    let mesh = *cost.mesh();
    // Stage costs depend on the stage and its layer count only (all layers are alike).
    let most = layers + 1 - mesh.pp;
    let index = |stage: usize, count: usize| stage * (most + 1) + count;
    let mut seconds = vec![0.0; mesh.pp * (most + 1)];
    let mut bytes = vec![0u64; mesh.pp * (most + 1)];
    for stage in 0..mesh.pp {
        for count in 1..=most {
            seconds[index(stage, count)] = cost.stage_seconds(stage, count);
            bytes[index(stage, count)] = cost.stage_memory(stage, count).total();
        }
    }
    let fits = |s: usize, i: usize, j: usize| {
        (bytes[index(s, j - i)] <= limit).then(|| seconds[index(s, j - i)])
    };
    if let Some(partition) = optimal_partition(layers, mesh.pp, fits) {
        let estimate = cost.estimate(&partition.stage_layers);
        let plan = Plan::from_estimate(&mesh, partition.stage_layers, &estimate);
        return MeshOutcome::Planned(plan, estimate.memory);
    }
    // Nothing fits: report the split whose fullest stage needs least.
    let least_memory = optimal_partition(layers, mesh.pp, |s, i, j| {
        Some(bytes[index(s, j - i)] as f64)
    });
    let stage_layers = least_memory.map(|p| p.stage_layers).unwrap_or_default();
    let (stage, breakdown) = stage_layers
        .iter()
        .enumerate()
        .map(|(s, &k)| (s, cost.stage_memory(s, k)))
        .max_by_key(|(_, breakdown)| breakdown.total())
        .unwrap_or((0, MemoryBreakdown::default()));
    MeshOutcome::Rejected(Rejected {
        config: mesh.layout(stage_layers),
        reason: RejectReason::OutOfMemory {
            stage,
            needed_bytes: breakdown.total(),
            limit_bytes: limit,
            breakdown,
        },
    })
}

fn no_plan(
    devices: usize,
    limit: u64,
    any_valid_layout: bool,
    rejected: Vec<Rejected>,
) -> SearchError {
    let closest = rejected
        .iter()
        .filter_map(|r| r.reason.over_by_bytes().map(|over| (over, r)))
        .min_by_key(|(over, _)| *over)
        .map(|(_, r)| r.clone());
    match closest {
        Some(closest) if any_valid_layout => {
            let (stage, needed_bytes) = match &closest.reason {
                RejectReason::OutOfMemory {
                    stage,
                    needed_bytes,
                    ..
                } => (*stage, *needed_bytes),
                RejectReason::Invalid { .. } => (0, 0),
            };
            SearchError::NothingFits {
                closest: Box::new(closest),
                stage,
                needed_bytes,
                limit_bytes: limit,
                rejected,
            }
        }
        _ => SearchError::NoValidLayout {
            devices,
            example: rejected
                .first()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "no layout".into()),
            rejected,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSpec, ComputeHints, LinkSpec};
    use crate::fitted::FittedProfile;
    use crate::latency::FitOptions;
    use crate::profile::{ProfileLadder, analytic_profile};
    use crate::workload::{ModelShape, Workload};
    use megagraph_layout::ParallelConfigError;

    /// The cost model of `shape` on `nodes` nodes of `devices_per_node` GPUs of `memory` bytes,
    /// for steps of `sequences` sequences of `seq_len` nodes.
    fn model_of(
        shape: ModelShape,
        devices_per_node: usize,
        nodes: usize,
        memory: u64,
        seq_len: usize,
        sequences: usize,
    ) -> CostModel {
        let hints = ComputeHints {
            peak_flops: 4.95e14,
            memory_bandwidth_bytes_per_second: 4.8e12,
            efficiency: 0.5,
            kernel_launch_seconds: 5e-6,
        };
        let table = analytic_profile(&hints, "gpu", &shape, 4, &ProfileLadder::default()).unwrap();
        let fitted = FittedProfile::fit(&table, &FitOptions::default()).unwrap();
        let cluster = ClusterSpec {
            name: "test".into(),
            device: "gpu".into(),
            nodes,
            devices_per_node,
            memory_bytes_per_device: memory,
            intra_node: LinkSpec {
                bandwidth_bytes_per_second: 450e9,
                latency_seconds: 2e-6,
            },
            inter_node: Some(LinkSpec {
                bandwidth_bytes_per_second: 50e9,
                latency_seconds: 1e-5,
            }),
            compute: Some(hints),
            backward_waits_for_other_ranks: false,
        };
        let workload = Workload {
            seq_len,
            sequences_per_step: sequences,
            dtype_bytes: 4,
            near_pairs_per_row: None,
        };
        CostModel::new(shape, workload, cluster, fitted)
    }

    #[test]
    fn respects_memory_limits_and_explains_rejections() {
        // 4 x 24 GB devices, S = 96K: one sequence's index rows alone are 9.9 GB per device at
        // cp = 1.
        let model = model_of(ModelShape::paper(), 4, 1, 24_000_000_000, 98_304, 8);
        let report = search(&model, &SearchOptions::default()).unwrap();
        let limit = report.setting.memory_limit_bytes;
        assert_eq!(limit, 22_800_000_000);
        for plan in &report.candidates {
            assert!(plan.predicted.peak_bytes_per_device <= limit, "{plan:?}");
            assert_eq!(plan.layout.pp * plan.layout.cp * plan.layout.dp, 4);
            plan.layout.validate(16, 98_304, 8).unwrap();
        }
        // Ranked by time, except that the leanest plan within 1% of the fastest goes first.
        for pair in report.candidates[1..].windows(2) {
            assert!(pair[0].predicted.step_seconds <= pair[1].predicted.step_seconds);
        }
        let fastest = report
            .candidates
            .iter()
            .map(|p| p.predicted.step_seconds)
            .fold(f64::INFINITY, f64::min);
        assert!(report.best.predicted.step_seconds <= 1.01 * fastest);
        for plan in report
            .candidates
            .iter()
            .filter(|p| p.predicted.step_seconds <= 1.01 * fastest)
        {
            assert!(
                report.best.predicted.peak_bytes_per_device <= plan.predicted.peak_bytes_per_device
            );
        }
        assert_eq!(report.best, report.candidates[0]);
        // pp = 4 with one micro-batch per replica step holds the index rows of 1 sequence, but with
        // 8 micro-batches stage 0 holds 4: 4 x 9.9 GB does not fit.
        let oom = report
            .rejected
            .iter()
            .find(|r| r.config.pp == 4 && r.config.micro_batches == 8)
            .expect("pp = 4, 8 micro-batches is rejected");
        match &oom.reason {
            RejectReason::OutOfMemory {
                stage,
                needed_bytes,
                limit_bytes,
                breakdown,
            } => {
                assert_eq!(*stage, 0);
                assert!(needed_bytes > limit_bytes);
                assert_eq!(breakdown.in_flight_micro_batches, 4);
                assert_eq!(breakdown.largest().0, "distance index rows");
            }
            other => panic!("expected out of memory, got {other:?}"),
        }
        assert!(
            oom.to_string().contains("out of memory on stage 0 by"),
            "{oom}"
        );
        // Every structurally invalid layout is named: cp = 4 divides 98304, so all layouts are
        // valid here, and only memory rejects.
        assert!(
            report
                .rejected
                .iter()
                .all(|r| matches!(r.reason, RejectReason::OutOfMemory { .. }))
        );
    }

    #[test]
    fn invalid_layouts_are_rejected_with_typed_reasons() {
        // S = 2004 is divisible by 4 but not by 8; 2 layers cannot fill 4 or 8 stages; 6
        // sequences cannot be split over 4 or 8 replicas.
        let shape = ModelShape {
            layers: 2,
            ..ModelShape::paper()
        };
        let model = model_of(shape, 8, 1, 141_000_000_000, 2_004, 6);
        let report = search(&model, &SearchOptions::default()).unwrap();
        let reasons: Vec<&ParallelConfigError> = report
            .rejected
            .iter()
            .filter_map(|r| match &r.reason {
                RejectReason::Invalid { error } => Some(error),
                RejectReason::OutOfMemory { .. } => None,
            })
            .collect();
        assert!(reasons.contains(&&ParallelConfigError::MoreStagesThanLayers { pp: 8, layers: 2 }));
        assert!(
            reasons.contains(&&ParallelConfigError::ContextDoesNotDivideSequence {
                cp: 8,
                seq_len: 2004
            })
        );
        assert!(
            reasons.contains(&&ParallelConfigError::DataDoesNotDivideSequences {
                dp: 4,
                sequences_per_step: 6
            })
        );
        for plan in &report.candidates {
            plan.layout.validate(2, 2_004, 6).unwrap();
        }
        let json = serde_json::to_value(&report.rejected[0]).unwrap();
        assert!(
            json["reason"]["kind"].is_string() && json["config"]["pp"].is_number(),
            "{json}"
        );
    }

    #[test]
    fn nothing_fits_names_the_closest_configuration() {
        // 2 GB devices and S = 64K: the index rows alone are 2.1 GB at cp = 2.
        let model = model_of(ModelShape::paper(), 2, 1, 2_000_000_000, 65_536, 2);
        match search(&model, &SearchOptions::default()) {
            Err(error @ SearchError::NothingFits { .. }) => {
                let SearchError::NothingFits {
                    closest,
                    needed_bytes,
                    limit_bytes,
                    ..
                } = &error
                else {
                    unreachable!()
                };
                assert_eq!(closest.config.cp, 2, "{closest}");
                assert!(needed_bytes > limit_bytes);
                assert!(
                    error.to_string().contains("closest: pp=1 cp=2 dp=1"),
                    "{error}"
                );
            }
            other => panic!("expected NothingFits, got {other:?}"),
        }
    }

    #[test]
    fn plan_json_has_exactly_the_documented_fields() {
        let model = model_of(ModelShape::paper(), 2, 1, 141_000_000_000, 4_096, 4);
        let report = search(&model, &SearchOptions::default()).unwrap();
        let json = serde_json::to_value(&report.best).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "bottleneck",
                "cp",
                "cp_mode",
                "dp",
                "micro_batches",
                "pp",
                "predicted_peak_bytes_per_device",
                "predicted_step_seconds",
                "stage_layers"
            ]
        );
        let back: Plan = serde_json::from_value(json).unwrap();
        assert_eq!(back, report.best);
        let report_json = serde_json::to_value(&report).unwrap();
        for key in ["best", "candidates", "rejected", "search_seconds"] {
            assert!(report_json.get(key).is_some(), "{key}");
        }
    }
}

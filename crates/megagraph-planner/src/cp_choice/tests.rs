//! The search tries both context modes and says why it kept one.
//!
//! Every problem here has one layer, one sequence per step and 4 devices, so the only valid
//! layout is `pp = 1, cp = 4, dp = 1`: what varies is the mode.

use crate::api::{PlanError, evaluate};
use crate::cluster::{ClusterSpec, ComputeHints, LinkSpec};
use crate::cost::CostModel;
use crate::fitted::FittedProfile;
use crate::latency::FitOptions;
use crate::profile::{ProfileLadder, ProfileTable, analytic_profile};
use crate::report::{PlanReport, RejectReason};
use crate::search::{SearchError, search};
use crate::search_options::SearchOptions;
use crate::workload::{ModelShape, Workload};
use megagraph_layout::{CpMode, ParallelConfig, ParallelConfigError};

const HINTS: ComputeHints = ComputeHints {
    peak_flops: 4.95e14,
    memory_bandwidth_bytes_per_second: 4.8e12,
    efficiency: 0.5,
    kernel_launch_seconds: 5e-6,
};

/// A problem on one node of 4 devices joined by `link`.
struct Problem {
    shape: ModelShape,
    workload: Workload,
    cluster: ClusterSpec,
    profile: ProfileTable,
}

fn problem(heads: usize, seq_len: usize, link: LinkSpec, memory_bytes: u64) -> Problem {
    let shape = ModelShape {
        layers: 1,
        heads,
        hidden: 8 * heads,
        ..ModelShape::paper()
    };
    let profile = analytic_profile(&HINTS, "gpu", &shape, 4, &ProfileLadder::default()).unwrap();
    Problem {
        workload: Workload {
            seq_len,
            sequences_per_step: 1,
            dtype_bytes: 4,
            near_pairs_per_row: None,
        },
        cluster: ClusterSpec {
            name: "test".into(),
            device: "gpu".into(),
            nodes: 1,
            devices_per_node: 4,
            memory_bytes_per_device: memory_bytes,
            intra_node: link,
            inter_node: None,
            compute: Some(HINTS),
            backward_waits_for_other_ranks: false,
        },
        shape,
        profile,
    }
}

impl Problem {
    fn model(&self) -> CostModel {
        let fitted = FittedProfile::fit(&self.profile, &FitOptions::default()).unwrap();
        CostModel::new(self.shape.clone(), self.workload.clone(), self.cluster.clone(), fitted)
    }

    fn search(&self, cp_mode: Option<CpMode>) -> Result<PlanReport, SearchError> {
        let options = SearchOptions {
            cp_mode,
            ..SearchOptions::default()
        };
        search(&self.model(), &options)
    }

    /// The predicted step seconds and peak bytes of `pp = 1, cp = 4` in `mode`.
    fn predict(&self, mode: CpMode) -> (f64, u64) {
        let config = ParallelConfig::uniform(1, 4, 1, 1, 1).unwrap().with_cp_mode(mode);
        let evaluation = evaluate(
            &self.cluster,
            &self.shape,
            &self.workload,
            &self.profile,
            &config,
            &SearchOptions::default(),
        )
        .unwrap();
        (
            evaluation.plan.predicted.step_seconds,
            evaluation.plan.predicted.peak_bytes_per_device,
        )
    }
}

/// A link with almost no latency and little bandwidth: the ring's K/V steps outlast the block
/// compute, and Ulysses sends less (at cp = 4, 4 x 3/4 against 3 x 2 blocks forward).
const THIN: LinkSpec = LinkSpec {
    bandwidth_bytes_per_second: 2e9,
    latency_seconds: 1e-9,
};

/// NVLink-like: the ring's K/V hide under the block compute.
const NVLINK: LinkSpec = LinkSpec {
    bandwidth_bytes_per_second: 450e9,
    latency_seconds: 2e-6,
};

const LARGE: u64 = 141_000_000_000;

#[test]
fn ulysses_is_chosen_where_the_ring_cannot_hide_its_exchange() {
    let problem = problem(8, 4_096, THIN, LARGE);
    let (ring, _) = problem.predict(CpMode::Ring);
    let (ulysses, _) = problem.predict(CpMode::Ulysses);
    assert!(ulysses < ring, "ulysses {ulysses} s, ring {ring} s");
    let report = problem.search(None).unwrap();
    assert_eq!(
        (report.best.layout.cp, report.best.layout.cp_mode),
        (4, CpMode::Ulysses)
    );
    assert_eq!(report.candidates.len(), 2, "both modes are ranked");
    assert_eq!(report.candidates[1].layout.cp_mode, CpMode::Ring);
    let why = &report.cp_mode_reason;
    assert!(
        why.starts_with("ulysses: 4 all-to-alls of") && why.contains("against ring's 3 ring steps of"),
        "{why}"
    );
    assert!(why.contains("s per step against"), "{why}");
    let text = report.explain();
    assert!(
        text.contains("cp_mode=ulysses") && text.contains(&format!("Context mode: {why}")),
        "{text}"
    );
}

#[test]
fn the_ring_is_chosen_where_its_exchange_hides_under_compute() {
    let problem = problem(8, 16_384, NVLINK, LARGE);
    let (ring, _) = problem.predict(CpMode::Ring);
    let (ulysses, _) = problem.predict(CpMode::Ulysses);
    assert!(ring < ulysses, "ring {ring} s, ulysses {ulysses} s");
    let report = problem.search(None).unwrap();
    assert_eq!(report.best.layout.cp_mode, CpMode::Ring);
    assert!(
        report.cp_mode_reason.starts_with("ring: 3 ring steps of"),
        "{}",
        report.cp_mode_reason
    );
    // asked for, Ulysses is planned anyway and the reason says so
    let forced = problem.search(Some(CpMode::Ulysses)).unwrap();
    assert_eq!(forced.best.layout.cp_mode, CpMode::Ulysses);
    assert_eq!(forced.candidates.len(), 1);
    assert!(
        forced.cp_mode_reason.starts_with("ulysses: asked for"),
        "{}",
        forced.cp_mode_reason
    );
}

#[test]
fn the_ring_is_chosen_when_ulysses_whole_index_does_not_fit() {
    let roomy = problem(8, 16_384, THIN, LARGE);
    let (ring_seconds, ring_bytes) = roomy.predict(CpMode::Ring);
    let (ulysses_seconds, ulysses_bytes) = roomy.predict(CpMode::Ulysses);
    assert!(ulysses_seconds < ring_seconds);
    // Ulysses keeps the whole 16384^2 index on every rank, the ring a quarter of its rows
    assert!(ulysses_bytes >= ring_bytes + 16_384 * 16_384);
    // memory between the two
    let limit = (ring_bytes + ulysses_bytes) / 2;
    let tight = problem(8, 16_384, THIN, (limit as f64 / 0.95) as u64);
    let report = tight.search(None).unwrap();
    assert_eq!(report.best.layout.cp_mode, CpMode::Ring);
    let why = &report.cp_mode_reason;
    assert!(
        why.contains("ulysses would need") && why.contains("distance index rows"),
        "{why}"
    );
}

#[test]
fn heads_that_cp_does_not_divide_rule_ulysses_out() {
    let problem = problem(6, 4_096, THIN, LARGE);
    // Ulysses would be faster, but 6 heads cannot be split over 4 ranks
    let report = problem.search(None).unwrap();
    assert!(report.candidates.iter().all(|plan| plan.layout.cp_mode == CpMode::Ring));
    assert!(
        report.cp_mode_reason.starts_with("ring: heads 6 not divisible by cp 4"),
        "{}",
        report.cp_mode_reason
    );
    // asked for, no layout is left, and each rejection says why
    match problem.search(Some(CpMode::Ulysses)) {
        Err(SearchError::NoValidLayout { rejected, .. }) => assert!(rejected.iter().any(|r| matches!(
            r.reason,
            RejectReason::Invalid {
                error: ParallelConfigError::HeadsNotMultipleOfContext { heads: 6, cp: 4 }
            }
        ))),
        other => panic!("expected no valid layout, got {other:?}"),
    }
    // a given Ulysses layout is refused with a typed error
    let config = ParallelConfig::uniform(1, 4, 1, 1, 1)
        .unwrap()
        .with_cp_mode(CpMode::Ulysses);
    let error = evaluate(
        &problem.cluster,
        &problem.shape,
        &problem.workload,
        &problem.profile,
        &config,
        &SearchOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            error,
            PlanError::Config(ParallelConfigError::HeadsNotMultipleOfContext { heads: 6, cp: 4 })
        ),
        "{error}"
    );
}

#[test]
fn an_edge_encoding_rules_ulysses_out_and_keeps_the_ring() {
    // where Ulysses would win without one (see `ulysses_is_chosen_where_..`)
    let mut problem = problem(8, 4_096, THIN, LARGE);
    problem.shape.edge_feature_dim = 4;
    problem.profile = analytic_profile(&HINTS, "gpu", &problem.shape, 4, &ProfileLadder::default()).unwrap();
    let report = problem.search(None).unwrap();
    assert_eq!((report.best.layout.cp, report.best.layout.cp_mode), (4, CpMode::Ring));
    assert!(report.candidates.iter().all(|plan| plan.layout.cp_mode == CpMode::Ring));
    assert!(report.candidates.iter().any(|plan| plan.layout.cp > 1));
    assert!(
        report.cp_mode_reason.starts_with("ring: the edge encoding's dense bias"),
        "{}",
        report.cp_mode_reason
    );
    // asked for, no layout is left, and each rejection says why
    match problem.search(Some(CpMode::Ulysses)) {
        Err(SearchError::NoValidLayout { rejected, .. }) => assert!(rejected.iter().any(|r| matches!(
            r.reason,
            RejectReason::Invalid {
                error: ParallelConfigError::DenseBiasWithUlysses { cp: 4 }
            }
        ))),
        other => panic!("expected no valid layout, got {other:?}"),
    }
    // a given Ulysses layout is refused with a typed error
    let config = ParallelConfig::uniform(1, 4, 1, 1, 1)
        .unwrap()
        .with_cp_mode(CpMode::Ulysses);
    let error = evaluate(
        &problem.cluster,
        &problem.shape,
        &problem.workload,
        &problem.profile,
        &config,
        &SearchOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(error, PlanError::Config(ParallelConfigError::DenseBiasWithUlysses { cp: 4 })),
        "{error}"
    );
}

#[test]
fn without_context_parallelism_there_is_nothing_to_choose() {
    let mut problem = problem(8, 4_096, THIN, LARGE);
    problem.cluster.devices_per_node = 1;
    let report = problem.search(None).unwrap();
    assert_eq!((report.best.layout.cp, report.best.layout.cp_mode), (1, CpMode::Ring));
    assert_eq!(report.candidates.len(), 1);
    assert!(report.cp_mode_reason.contains("cp = 1"), "{}", report.cp_mode_reason);
}

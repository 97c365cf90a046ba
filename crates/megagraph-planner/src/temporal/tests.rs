//! Tests of the temporal planner on hand-made profiles.

use super::*;

/// Refinement samples `(refine, seconds, dependency)`.
fn refine(samples: &[(usize, f64, f64)]) -> Vec<RefineSample> {
    samples
        .iter()
        .map(|&(refine, seconds_per_batch, dependency_ratio)| RefineSample {
            refine,
            seconds_per_batch,
            dependency_ratio,
        })
        .collect()
}

/// Window samples `(window, cross-shard ratio, imbalance, nodes per window)`.
fn windows(samples: &[(usize, f64, f64, f64)]) -> Vec<WindowSample> {
    samples
        .iter()
        .map(
            |&(window, cross_shard_ratio, imbalance, nodes_per_window)| WindowSample {
                window,
                cross_shard_ratio,
                imbalance,
                nodes_per_window,
            },
        )
        .collect()
}

/// Batches of 2400 on 2 workers over 24,000 training events; the reference batch of 600
/// takes 0.2 s against the plain batch's 0.5 s (a line of 0.1 s + 1/6000 s per event).
fn profile(refine_samples: &[(usize, f64, f64)]) -> TemporalProfile {
    TemporalProfile {
        setting: TemporalSetting {
            dataset: "hand-made".into(),
            model: "tgn".into(),
            backend: "none".into(),
            workers: 2,
            batch_size: 2400,
            train_events: 24_000,
        },
        reference_batch: 600,
        reference_dependency_ratio: 0.05,
        reference_seconds_per_batch: 0.2,
        refine: refine(refine_samples),
        sync_seconds_per_node: 1e-5,
        windows: windows(&[(4800, 0.01, 1.0, 1000.0)]),
    }
}

fn plan(profile: &TemporalProfile) -> TemporalPlan {
    plan_temporal(profile).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn cheap_refinement_takes_more_chunks_than_expensive_refinement() {
    // staleness 0.20 at c = 1, 0.09 at 2, 0.04 at 4 (below the reference's 0.05)
    let cheap = plan(&profile(&[
        (1, 0.5, 0.20),
        (2, 0.55, 0.09),
        (4, 0.6, 0.04),
        (8, 0.7, 0.02),
    ]));
    assert_eq!(cheap.refine, 4);
    assert_eq!(cheap.refine_reason, RefineReason::ReachesReference);
    // the same staleness, but 4 chunks cost 1.8x the plain batch: beyond the budget
    let expensive = plan(&profile(&[
        (1, 0.5, 0.20),
        (2, 0.6, 0.09),
        (4, 0.9, 0.04),
        (8, 1.4, 0.02),
    ]));
    assert_eq!(expensive.refine, 2);
    assert_eq!(expensive.refine_reason, RefineReason::StopsPaying { next: None });
    assert!(!expensive.refine_candidates[2].within_budget);
    assert!(expensive.refine < cheap.refine);
    // 2 chunks remove 11/15 of the gap for 0.1 / 0.25 = 40% of the headroom: they pay; 4 chunks
    // within budget (0.74 s) remove 3/15 more for 56% more of the headroom: they do not
    let stops = plan(&profile(&[(1, 0.5, 0.20), (2, 0.6, 0.09), (4, 0.74, 0.06)]));
    assert_eq!(
        (stops.refine, stops.refine_reason),
        (2, RefineReason::StopsPaying { next: Some(4) })
    );
    // already fresh: no refinement
    let fresh = plan(&profile(&[(1, 0.5, 0.04), (2, 0.55, 0.02)]));
    assert_eq!((fresh.refine, fresh.refine_reason), (1, RefineReason::PlainIsFresh));
}

#[test]
fn the_window_trades_synchronization_against_cross_shard_events_and_balance() {
    let mut profile = profile(&[(1, 0.5, 0.20), (2, 0.55, 0.09), (4, 0.6, 0.04)]);
    // small windows sync often; large ones cut many events and balance worse
    profile.windows = windows(&[
        (4800, 0.01, 1.0, 4500.0),
        (9600, 0.05, 1.05, 5000.0),
        (24_000, 0.30, 1.5, 9000.0),
    ]);
    profile.sync_seconds_per_node = 1e-4;
    let plan = plan(&profile);
    assert_eq!((plan.window, plan.refine), (9600, 4));
    // W = 9600 by hand, in f64: 2.5 windows of a largest shard of 9600 x 1.05 / 2 = 5040
    // events in ceil(5040 / 2400) = 3 steps of 1680 events; a step is 0.1 + 1680 / 6000
    // seconds, plus IMR(4)'s 0.1 s per 2400 events in proportion
    let step = 0.1 + 1680.0 / 6000.0 + 0.1 * 1680.0 / 2400.0;
    let compute = 2.5 * 3.0 * step;
    let sync = 3.0 * 5000.0 * 1e-4;
    let reconcile = 3.0 * 0.05 * 9600.0 * 1e-4;
    let p = &plan.predicted;
    assert_eq!((p.steps, p.syncs), (8, 3));
    for (got, want) in [
        (p.compute_seconds, compute),
        (p.sync_seconds, sync),
        (p.reconcile_seconds, reconcile),
        (p.epoch_seconds, compute + sync + reconcile),
    ] {
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
    }
    assert!((plan.step_overhead_seconds - 0.1).abs() < 1e-12);
    // every other window predicts a longer epoch
    for c in &plan.window_candidates {
        assert!(
            c.sample.window == plan.window || c.predicted.epoch_seconds > p.epoch_seconds,
            "{c:?}"
        );
    }
    let text = plan.explain();
    assert!(text.contains("--window 9600 --refine 4"), "{text}");
    assert!(text.contains("24000") && text.contains("<- chosen"), "{text}");
    // with one worker nothing is synchronized, and the largest window (fewest steps) wins
    profile.setting.workers = 1;
    for w in &mut profile.windows {
        w.imbalance = 1.0;
    }
    let single = plan_temporal(&profile).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(single.predicted.syncs, 0);
    assert_eq!(single.predicted.sync_seconds + single.predicted.reconcile_seconds, 0.0);
}

#[test]
fn impossible_profiles_are_typed_errors_naming_the_field() {
    let good = profile(&[(1, 0.5, 0.2), (2, 0.55, 0.1)]);
    type Edit = fn(&mut TemporalProfile);
    let cases: [(&str, Edit); 11] = [
        ("workers", |p| p.setting.workers = 0),
        ("batch_size", |p| p.setting.batch_size = 30_000),
        ("batch_size", |p| p.setting.batch_size = 0),
        ("refine", |p| p.refine = refine(&[(2, 0.5, 0.1)])),
        ("refine.refine", |p| p.refine = refine(&[(1, 0.5, 0.2), (1, 0.5, 0.2)])),
        ("refine.dependency_ratio", |p| p.refine = refine(&[(1, 0.5, 1.5)])),
        ("refine.seconds_per_batch", |p| p.refine = refine(&[(1, f64::NAN, 0.2)])),
        ("windows", |p| p.windows = Vec::new()),
        ("windows.window", |p| p.windows = windows(&[(1, 0.0, 1.0, 1.0)])),
        ("windows.imbalance", |p| p.windows = windows(&[(600, 0.0, 3.0, 1.0)])),
        ("sync_seconds_per_node", |p| p.sync_seconds_per_node = -1.0),
    ];
    for (field, edit) in cases {
        let mut profile = good.clone();
        edit(&mut profile);
        match plan_temporal(&profile) {
            Err(TemporalPlanError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn profiles_and_plans_round_trip_through_json() {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let path = dir.path().join("nested").join("temporal-profile.json");
    let profile = profile(&[(1, 0.5, 0.2), (2, 0.55, 0.1)]);
    profile.save(&path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(TemporalProfile::load(&path).ok(), Some(profile.clone()));
    std::fs::write(&path, "{\n  \"workers\": 0,\n  oops\n}").unwrap_or_else(|err| panic!("{err}"));
    match TemporalProfile::load(&path) {
        Err(TemporalPlanError::File(crate::ProfileError::Json { line, .. })) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
    let plan = plan(&profile);
    let json = serde_json::to_value(&plan).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(json["window"], 4800);
    assert!(json["predicted"]["epoch_seconds"].as_f64().is_some_and(|s| s > 0.0));
}

#[test]
fn windows_within_the_tolerance_go_to_the_lower_cross_shard_ratio() {
    let mut profile = profile(&[(1, 0.5, 0.20)]);
    // the same steps either way; 9600 syncs less and is faster by microseconds, but cuts more
    profile.sync_seconds_per_node = 1e-9;
    profile.windows = windows(&[(4800, 0.001, 1.0, 1000.0), (9600, 0.05, 1.0, 1000.0)]);
    let plan = plan(&profile);
    let (w4800, w9600) = (
        &plan.window_candidates[0].predicted,
        &plan.window_candidates[1].predicted,
    );
    assert!(w9600.epoch_seconds < w4800.epoch_seconds);
    assert!(w4800.epoch_seconds <= w9600.epoch_seconds * (1.0 + WINDOW_TOLERANCE));
    assert_eq!(plan.window, 4800);
    // a window clearly faster wins despite its cross-shard ratio
    profile.windows[0].nodes_per_window = 1e8;
    assert_eq!(plan_temporal(&profile).map(|p| p.window).ok(), Some(9600));
}

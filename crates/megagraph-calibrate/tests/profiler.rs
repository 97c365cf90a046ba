//! The real profiler and validation on a tiny model: a sane measured table, and plans run end
//! to end on the local mesh. Memory is measured with the runtime's counting allocator; no test
//! asserts anything about time.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use megagraph_parallel::CountingAllocator;
use std::sync::Arc;

use megagraph_calibrate::{
    InTurn, InTurnProfile, PlansToValidate, ProfilerOptions, ThreadAllocatorMeter, ValidationOptions, init_model,
    measure_profile, validate_plans, validate_plans_in_turn,
};
use megagraph_planner::{
    ClusterSpec, FitOptions, ModelShape, ParallelConfig, Plan, Prediction, ProfileLadder, ProfiledPart, SearchOptions,
    Workload, plan,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

type B = Autodiff<Flex>;

fn tiny() -> ModelShape {
    ModelShape {
        layers: 2,
        heads: 2,
        hidden: 16,
        ffn_hidden: 16,
        feature_dim: 8,
        num_classes: 3,
        distance_buckets: 5,
        degree_buckets: 9,
        key_tile: 8,
        edge_feature_dim: 0,
    }
}

fn options() -> ProfilerOptions {
    ProfilerOptions {
        ladder: ProfileLadder {
            rows: vec![16, 32, 64, 128],
            blocks: vec![8, 16, 32, 64],
            attention_batches: vec![1, 2],
            max_attention_pairs: 0,
        },
        // one warm-up run: the first run of a part also makes one-time allocations
        warmup: 1,
        repeats: 1,
        concurrency: 2,
        seed: 3,
        evict_bytes: 1 << 20,
    }
}

/// A short ladder: `rows`, attention blocks of 8 and 16 nodes of one sequence.
fn one_sequence_ladder(rows: Vec<usize>) -> ProfileLadder {
    ProfileLadder {
        rows,
        blocks: vec![8, 16],
        attention_batches: vec![1],
        max_attention_pairs: 0,
    }
}

#[test]
fn the_model_has_the_shapes_parameter_count() {
    for shape in [tiny(), ModelShape { edge_feature_dim: 6, ..tiny() }] {
        let model = init_model::<Flex>(&shape, &Default::default());
        assert_eq!(model.edge_encoding.is_some(), shape.edge_feature_dim > 0);
        assert_eq!(model.num_params() as u64, shape.parameters());
    }
}

#[test]
fn the_edge_encoding_makes_the_embedding_heavier() {
    // the embedding of one sequence of n nodes then also builds the bias of its n² pairs
    let plain = ModelShape { distance_buckets: 6, ..tiny() };
    let edges = ModelShape { edge_feature_dim: 8, ..plain.clone() };
    let options = ProfilerOptions {
        ladder: one_sequence_ladder(vec![64, 128]),
        concurrency: 1,
        repeats: 3,
        evict_bytes: 0,
        ..options()
    };
    let device = Default::default();
    let embedding = |shape: &ModelShape| {
        let table = measure_profile::<B>(shape, "flex", "test-cpu", &device, Arc::new(ThreadAllocatorMeter), &options, &mut |_| {})
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(table.key.shape.edge_feature_dim, shape.edge_feature_dim);
        let sample = table.embedding.last().copied().unwrap_or_else(|| panic!("no embedding sample"));
        assert_eq!(sample.size, 128);
        sample
    };
    let (without, with) = (embedding(&plain), embedding(&edges));
    println!("embedding at 128 nodes: {without:?} without, {with:?} with the edge encoding");
    assert!(
        with.forward_seconds + with.backward_seconds > without.forward_seconds + without.backward_seconds,
        "{with:?} vs {without:?}"
    );
    // the `[heads, n, n]` bias is live during the pass
    assert!(with.peak_bytes >= without.peak_bytes + (2 * 128 * 128 * 4) as u64, "{with:?} vs {without:?}");
}

#[test]
fn measured_profile_is_sane_and_plans_validate_end_to_end() {
    let shape = tiny();
    let device = Default::default();
    let mut calls = Vec::new();
    let table = measure_profile::<B>(
        &shape,
        "flex",
        "test-cpu",
        &device,
        Arc::new(ThreadAllocatorMeter),
        &options(),
        &mut |p| calls.push((p.part, p.batch, p.size, p.done, p.total)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{table}");
    table.validate().unwrap();
    assert!(!table.analytic);
    assert_eq!(table.key.backend, "flex");
    // every run reported, in order: 20 points, a warm-up pass and a timed one over all
    assert_eq!(calls.len(), 2 * (3 * 4 + 2 * 4));
    assert_eq!(
        &calls[..20],
        &calls[20..]
            .iter()
            .map(|c| (c.0, c.1, c.2, c.3 - 20, c.4))
            .collect::<Vec<_>>()[..]
    );
    assert!(
        calls
            .iter()
            .enumerate()
            .all(|(i, c)| c.3 == i + 1 && c.4 == calls.len())
    );
    assert_eq!(table.attention_batches(), vec![1, 2]);
    for part in ProfiledPart::ALL {
        for s in table.samples(part) {
            assert!(
                s.forward_seconds > 0.0 && s.backward_seconds > 0.0,
                "{part:?} {s:?}"
            );
            assert!(s.peak_bytes >= s.saved_bytes);
        }
    }
    // what a layer, an attention block and the head keep grows with the rows: from each size to
    // the next up to the 0.8 kB bookkeeping allocation that lands in or out of the measured
    // window now and then (it reversed the head's 16 and 32 rows, 1.2 kB apart, once in CI),
    // strictly from the smallest to the largest
    const BOOKKEEPING: u64 = 1024;
    for samples in [
        table.layer_dense.clone(),
        table.head.clone(),
        table.attention_at(1),
        table.attention_at(2),
    ] {
        for pair in samples.windows(2) {
            assert!(pair[1].saved_bytes + BOOKKEEPING > pair[0].saved_bytes, "{pair:?}");
            assert!(pair[1].peak_bytes + BOOKKEEPING > pair[0].peak_bytes, "{pair:?}");
        }
        let (first, last) = (samples[0], samples[samples.len() - 1]);
        assert!(last.saved_bytes > first.saved_bytes + BOOKKEEPING, "{first:?} {last:?}");
    }
    // a layer keeps at least its input, Q, K and V: 4 x rows x hidden f32
    for s in &table.layer_dense {
        assert!(
            s.saved_bytes >= (4 * s.size * shape.hidden * 4) as u64,
            "{s:?}"
        );
    }
    // two sequences' blocks keep about twice what one keeps (beyond a fixed bookkeeping part),
    // at the largest block, 64: at 32 (about 4 kB) a bookkeeping allocation of 0.8 kB that
    // lands in or out of the measured window now and then is a fifth of it
    let (one, two) = (table.attention_at(1), table.attention_at(2));
    let (a, b) = (one[one.len() - 1], two[two.len() - 1]);
    let ratio = b.saved_bytes as f64 / a.saved_bytes as f64;
    assert!((1.5..=2.2).contains(&ratio), "{a:?} {b:?}");
    assert!(table.runtime_overhead_bytes < 64 << 20);
    // two copies: every timed run was repeated by the first alone
    let solo = table.solo.expect("two copies measure the solo ratios");
    assert_eq!(solo.copies, 2);
    solo.validate().unwrap();

    // plan with it, then run the two best plans
    let cluster = ClusterSpec::from_toml_file(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/clusters/cpu-local.toml"),
    )
    .unwrap();
    let workload = Workload {
        seq_len: 32,
        sequences_per_step: 4,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let search = SearchOptions {
        fit: FitOptions::default(),
        ..SearchOptions::default()
    };
    let report = plan(&cluster, &shape, &workload, &table, &search).unwrap();
    // a context-parallel and a pipelined plan, so both rings and stages run
    let pick = |want: fn(&megagraph_planner::Plan) -> bool| {
        report.candidates.iter().find(|p| want(p)).cloned().unwrap()
    };
    let top = vec![pick(|p| p.layout.cp == 2), pick(|p| p.layout.pp == 2)];
    let validation_options = ValidationOptions {
        warmup_steps: 1,
        steps: 1,
        // one step each, however fast
        measured_seconds: 0.0,
        ..ValidationOptions::default()
    };
    let run = PlansToValidate { shape: &shape, workload: &workload, plans: &top, options: &validation_options };
    let mut validation = validate_plans::<B>(run, &device, Arc::new(ThreadAllocatorMeter), &mut |_| {})
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{validation}");
    assert_eq!(validation.plans.len(), 2);
    for (row, planned) in validation.plans.iter().zip(&top) {
        assert_eq!(row.plan.layout.stage_layers, planned.layout.stage_layers);
        assert!(row.plan.measured_step_seconds().is_some_and(|s| s > 0.0));
        let world = planned.layout.pp * planned.layout.cp * planned.layout.dp;
        assert_eq!(row.rank_peak_bytes.len(), world);
        assert!(row.rank_peak_bytes.iter().all(|b| b.is_some_and(|b| b > 0)));
        assert_eq!(
            row.plan.measured_peak_bytes_per_device(),
            row.rank_peak_bytes.iter().flatten().copied().max()
        );
        assert!(row.time_error().is_some() && row.memory_error().is_some());
        let json = serde_json::to_value(&row.plan).unwrap();
        for field in ["measured_step_seconds", "measured_peak_bytes_per_device"] {
            assert!(json.get(field).is_some(), "{field}");
        }
    }
    assert!(validation.median_abs_memory_error().is_some());
    assert!(validation.to_string().contains("median |error|"));

    // the profile measured again in turn: before any session it is the profile itself, and
    // the predictions from it are the search's
    let mut in_turn = InTurnProfile::new(table.clone());
    assert_eq!(in_turn.table(), table);
    assert_eq!(in_turn.drift(), None);
    validation
        .add_in_turn_predictions(&in_turn, &cluster, &shape, &workload, &search)
        .unwrap();
    for row in &validation.plans {
        let predicted = row.in_turn_predicted_step_seconds.unwrap();
        assert!((predicted - row.plan.predicted.step_seconds).abs() < 1e-12 * predicted);
        assert_eq!(row.in_turn_time_error(), row.time_error());
    }
    // two sessions: every point measured again, memory columns kept
    for _ in 0..2 {
        in_turn
            .measure::<B>(&shape, &device, &ThreadAllocatorMeter, &options())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!((in_turn.sessions(), in_turn.passes()), (2, 2));
    let again = in_turn.table();
    again.validate().unwrap();
    for part in ProfiledPart::ALL {
        let (before, after) = (table.samples(part), again.samples(part));
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(after) {
            assert_eq!(
                (b.size, b.batch, b.saved_bytes, b.peak_bytes),
                (a.size, a.batch, a.saved_bytes, a.peak_bytes)
            );
            assert!(
                a.forward_seconds > 0.0 && a.backward_seconds > 0.0,
                "{part:?} {a:?}"
            );
        }
    }
    assert_ne!(again, table, "no point was measured again");
    assert!(
        again
            .solo
            .is_some_and(|solo| solo.copies == 2 && solo != table.solo.unwrap())
    );
    assert!(in_turn.drift().is_some_and(|d| d > 0.0 && d.is_finite()));
    validation
        .add_in_turn_predictions(&in_turn, &cluster, &shape, &workload, &search)
        .unwrap();
    let summary = validation.in_turn_profile.clone().unwrap();
    assert_eq!((summary.sessions, summary.passes), (2, 2));
    // both sessions after the validation, one after the other, each with its time factor
    let times = &summary.session_times;
    assert!(
        times.len() == 2 && 0.0 < times[0] && times[0] < times[1],
        "{times:?}"
    );
    let factors = &summary.session_time_factors;
    assert!(
        factors.len() == 2 && factors.iter().all(|f| f.is_finite() && *f > 0.0),
        "{factors:?}"
    );
    // every measured step has its time, in the order run and before the sessions
    for row in &validation.plans {
        let steps = &row.step_times;
        assert_eq!(steps.len(), row.step_seconds.len());
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
        assert!(steps.iter().all(|&t| t > 0.0 && t < times[0]), "{steps:?}");
    }
    assert!(
        validation
            .plans
            .iter()
            .all(|row| row.in_turn_time_error().is_some())
    );
    assert!(
        validation
            .to_string()
            .contains("with the profile measured in turn")
    );
}

#[test]
fn one_copy_measures_no_solo_ratios() {
    let options = ProfilerOptions {
        ladder: ProfileLadder {
            rows: vec![16, 32],
            blocks: vec![8, 16],
            attention_batches: vec![1],
            max_attention_pairs: 0,
        },
        concurrency: 1,
        ..options()
    };
    let table = measure_profile::<B>(
        &tiny(),
        "flex",
        "test-cpu",
        &Default::default(),
        Arc::new(ThreadAllocatorMeter),
        &options,
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(table.solo, None);
    // and the JSON leaves them out, as profiles measured before them were
    let json = serde_json::to_value(&table).unwrap();
    assert!(json.get("solo").is_none());
}

#[test]
fn the_validation_protocol_measures_the_profile_between_rounds() {
    let shape = tiny();
    let device = Default::default();
    let profiler = ProfilerOptions {
        ladder: one_sequence_ladder(vec![16, 32]),
        concurrency: 1,
        repeats: 3,
        ..options()
    };
    let table = measure_profile::<B>(
        &shape,
        "flex",
        "test-cpu",
        &device,
        Arc::new(ThreadAllocatorMeter),
        &profiler,
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cluster = ClusterSpec::from_toml_file(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/clusters/cpu-local.toml"),
    )
    .unwrap();
    let workload = Workload {
        seq_len: 32,
        sequences_per_step: 4,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let search = SearchOptions::default();
    let mut report = plan(&cluster, &shape, &workload, &table, &search).unwrap();
    let top: Vec<_> = report.candidates.iter().take(2).cloned().collect();
    let options = ValidationOptions {
        warmup_steps: 1,
        steps: 2,
        measured_seconds: 0.0,
        rounds: 2,
        ..ValidationOptions::default()
    };
    let mut rounds_done = 0;
    let run = PlansToValidate { shape: &shape, workload: &workload, plans: &top, options: &options };
    let validation = validate_plans_in_turn::<B>(
        run,
        &device,
        Arc::new(ThreadAllocatorMeter),
        Some(InTurn {
            profile: &table,
            profiler: &profiler,
            cluster: &cluster,
            search: &search,
        }),
        &mut |p| rounds_done += usize::from(p.round_done),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((validation.rounds, rounds_done), (2, 2));
    // a session before the rounds and one after each, sharing the profile's 3 timed passes
    let summary = validation.in_turn_profile.clone().unwrap();
    assert_eq!((summary.sessions, summary.passes), (3, 3));
    assert!(summary.session_times[0] < 0.0 && summary.session_times[2] > 0.0);
    for row in &validation.plans {
        assert!(row.in_turn_predicted_step_seconds.is_some_and(|s| s > 0.0));
        assert_eq!(row.step_seconds.len(), 2);
    }
    // the measurements land on the report's plans of the same layout
    validation.apply_to(&mut report);
    for (plan, row) in report.candidates.iter().zip(&validation.plans) {
        assert_eq!(plan.layout, row.plan.layout);
        assert_eq!(plan.measured, row.plan.measured);
        assert!(plan.measured.is_some());
    }
    assert_eq!(report.best.measured, report.candidates[0].measured);
    assert!(report.candidates[2..].iter().all(|p| p.measured.is_none()));
}

#[test]
fn validation_measures_the_index_bytes_the_memory_model_counts() {
    let shape = tiny();
    let device = Default::default();
    let plans: Vec<Plan> = [(1, 1), (1, 2), (2, 2)]
        .into_iter()
        .map(|(pp, cp)| {
            let layout = ParallelConfig::uniform(pp, cp, 1, 2, shape.layers).unwrap_or_else(|e| panic!("{e}"));
            Plan::predicted(layout, Prediction { step_seconds: 1.0, peak_bytes_per_device: 1, bottleneck: String::new() })
        })
        .collect();
    let options = ValidationOptions { warmup_steps: 0, steps: 1, measured_seconds: 0.0, rounds: 1, ..ValidationOptions::default() };
    // 3 stored pairs of 64 a row: sparse; 20 of 64: more than a fifth, dense
    for near_pairs_per_row in [Some(3), Some(20), None] {
        let workload = Workload { seq_len: 64, sequences_per_step: 4, dtype_bytes: 4, near_pairs_per_row };
        let run = PlansToValidate { shape: &shape, workload: &workload, plans: &plans, options: &options };
        let report = validate_plans::<B>(run, &device, Arc::new(ThreadAllocatorMeter), &mut |_| {})
            .unwrap_or_else(|e| panic!("{e}"));
        for validated in &report.plans {
            let predicted = validated.predicted_index_bytes as f64;
            let sparse = near_pairs_per_row == Some(3);
            assert_eq!(predicted, workload.index_bytes_per_micro_batch(validated.plan.layout.cp, 1, 2) as f64);
            for &measured in &validated.rank_index_bytes {
                // a sparse block also holds one row offset per sequence more than its rows
                let error = (predicted - measured as f64).abs() / measured as f64;
                assert!(error <= if sparse { 0.02 } else { 0.0 }, "{near_pairs_per_row:?} {:?}: predicted {predicted}, measured {measured}", validated.plan.layout);
            }
        }
    }
}

//! MegaGraph's Table I on this machine: a pipeline of two stages (`pp = 2`) whose embedding
//! stage is heavy (Graphormer's edge encoding), the planner's balanced layer split against the
//! naive even split, in one run.
//!
//! The model: `L` layers (default 8), 8 heads, hidden 64 (FFN 64), 16 random input features,
//! 16 classes, and an edge encoding over `E` edge features (default 16) along paths of up to
//! `D` hops (default 4): stage 0 builds the `[heads, S, S]` bias of every sequence (a gather of
//! `S² · D` projected edges), the later stage receives it with the activations. The data:
//! [`SyntheticSource`], one random sequence of `S` nodes (default 512) with random paths, 8
//! sequences per step in 8 micro-batches (one sequence each).
//!
//! The run:
//! 1. profiles the model's parts on this machine ([`measure_profile`], two copies at once as
//!    the two ranks run) and asks the planner ([`plan`] on `configs/clusters/cpu-local.toml`)
//!    for its best `pp = 2, cp = 1, dp = 1` split at the same micro-batches;
//! 2. trains 1 warm-up step and `MEGAGRAPH_BENCH_STEPS` measured steps (default 5) with the
//!    naive even split and with the planner's split, one step of each in turn, and reports
//!    the median time per step, each stage's peak memory (counted per worker thread by
//!    [`CountingAllocator`]) and busy time, and the planner's prediction of each: for this machine (its ranks share the cores,
//!    so a stage runs faster while the other waits) and for ranks on devices of their own.
//!
//! Run: `cargo bench --bench table_one`. `MEGAGRAPH_BENCH_SEQ_LEN`, `MEGAGRAPH_BENCH_LAYERS`,
//! `MEGAGRAPH_BENCH_MAX_DISTANCE`, `MEGAGRAPH_BENCH_EDGE_DIM` and `MEGAGRAPH_BENCH_MICRO_BATCHES`
//! change the sizes. Ranks run as
//! threads of one CPU (Flex), so the figures compare the balance of the two splits on the same
//! cores, not the speed-up of separate devices.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use megagraph_calibrate::{ProfilerOptions, SyntheticSource, ThreadAllocatorMeter, init_model, measure_profile};
use megagraph_parallel::{CountingAllocator, CpMode, ParallelConfig, ParallelTrainer, StepOutput, TrainerOptions};
use megagraph_planner::{ClusterSpec, ModelShape, ProfileLadder, SearchOptions, Workload, evaluate, plan};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

type B = Autodiff<Flex>;

const SEQUENCES_PER_STEP: usize = 8;
const MIB: f64 = 1024.0 * 1024.0;

/// `variable` as a number, or `default` when unset or not a number.
fn env_or(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(default)
}

/// Micro-batches per step (`MEGAGRAPH_BENCH_MICRO_BATCHES`, default 8: one sequence each); a
/// divisor of [`SEQUENCES_PER_STEP`].
fn micro_batches() -> usize {
    let wanted = env_or("MEGAGRAPH_BENCH_MICRO_BATCHES", 8).clamp(1, SEQUENCES_PER_STEP);
    (1..=wanted)
        .rev()
        .find(|m| SEQUENCES_PER_STEP.is_multiple_of(*m))
        .unwrap_or(1)
}

/// The benchmarked model.
fn shape() -> ModelShape {
    ModelShape {
        layers: env_or("MEGAGRAPH_BENCH_LAYERS", 8),
        heads: 8,
        hidden: 64,
        ffn_hidden: 64,
        feature_dim: 16,
        num_classes: 16,
        distance_buckets: env_or("MEGAGRAPH_BENCH_MAX_DISTANCE", 4) + 2,
        degree_buckets: 65,
        key_tile: 128,
        edge_feature_dim: env_or("MEGAGRAPH_BENCH_EDGE_DIM", 16),
    }
}

/// One split's measurements and the planner's prediction.
struct Row {
    split: Vec<usize>,
    label: &'static str,
    /// Median seconds per measured step.
    step_seconds: f64,
    predicted_seconds: f64,
    /// The planner's prediction with every rank on a device of its own (no sharing ratios,
    /// backward passes independent).
    dedicated_seconds: f64,
    /// Per stage: the largest peak bytes over the measured steps.
    peak_bytes: Vec<usize>,
    predicted_peak_bytes: Vec<u64>,
    /// Per stage: mean busy seconds per step.
    busy_seconds: Vec<f64>,
}

/// The planner's best `pp = 2` split of `shape` on `workload`, from `profile`.
fn planner_split(
    shape: &ModelShape,
    workload: &Workload,
    cluster: &ClusterSpec,
    profile: &megagraph_planner::ProfileTable,
) -> Result<Vec<usize>, String> {
    let options = SearchOptions {
        cp_mode: Some(CpMode::Ring),
        ..SearchOptions::default()
    };
    let report = plan(cluster, shape, workload, profile, &options).map_err(|e| e.to_string())?;
    report
        .candidates
        .iter()
        .map(|plan| &plan.layout)
        .find(|layout| layout.pp == 2 && layout.cp == 1 && layout.dp == 1 && layout.micro_batches == micro_batches())
        .map(|layout| layout.stage_layers.clone())
        .ok_or_else(|| format!("the planner kept no pp = 2 plan at {} micro-batches", micro_batches()))
}

/// The `pp = 2` pipeline of `split` at [`micro_batches`] micro-batches.
fn pipeline(split: &[usize]) -> ParallelConfig {
    ParallelConfig {
        pp: 2,
        cp: 1,
        dp: 1,
        micro_batches: micro_batches(),
        stage_layers: split.to_vec(),
        cp_mode: CpMode::Ring,
    }
}

/// A trainer of `split` on the synthetic source.
fn trainer(shape: &ModelShape, seq_len: usize, split: &[usize]) -> Result<ParallelTrainer<B>, String> {
    let device = Default::default();
    let options = TrainerOptions::new(seq_len, SEQUENCES_PER_STEP)
        .with_optimizer(AdamWConfig::new())
        .with_timeout(Duration::from_secs(3600));
    let source = Arc::new(SyntheticSource::new(shape, seq_len, 7));
    ParallelTrainer::<B>::new(pipeline(split), init_model(shape, &device), source, options, vec![device])
        .map_err(|e| e.to_string())
}

/// Trains every split of `splits` for one warm-up and `steps` measured steps, their steps
/// interleaved (one step of each split in turn), so a change of the machine's load during the
/// run falls on all of them alike. Returns the measured steps of each split.
fn measure(shape: &ModelShape, seq_len: usize, splits: &[&[usize]], steps: usize) -> Result<Vec<Vec<StepOutput>>, String> {
    let mut trainers = splits
        .iter()
        .map(|split| trainer(shape, seq_len, split))
        .collect::<Result<Vec<_>, _>>()?;
    let sequences: Vec<usize> = (0..SEQUENCES_PER_STEP).collect();
    let mut outputs: Vec<Vec<StepOutput>> = splits.iter().map(|_| Vec::with_capacity(steps)).collect();
    for step in 0..=steps {
        for ((trainer, split), kept) in trainers.iter_mut().zip(splits).zip(&mut outputs) {
            let output = trainer.step(&sequences, 1e-3).map_err(|e| e.to_string())?;
            println!("    {split:?} step {step}: {:.3} s, loss {:.4}", output.seconds, output.loss);
            if step > 0 {
                kept.push(output);
            }
        }
    }
    Ok(outputs)
}

/// The row of `split` from its measured steps, with the planner's prediction.
fn row(split: Vec<usize>, label: &'static str, outputs: &[StepOutput], predicted: (f64, Vec<u64>)) -> Row {
    let mut seconds: Vec<f64> = outputs.iter().map(|o| o.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let per_stage = |stage: usize| {
        outputs
            .iter()
            .flat_map(|o| &o.ranks)
            .filter(move |r| r.coord.stage == stage)
    };
    Row {
        label,
        step_seconds: seconds.get(seconds.len() / 2).copied().unwrap_or(f64::NAN),
        predicted_seconds: predicted.0,
        dedicated_seconds: f64::NAN,
        peak_bytes: (0..split.len())
            .map(|s| per_stage(s).filter_map(|r| r.peak_bytes).max().unwrap_or(0))
            .collect(),
        predicted_peak_bytes: predicted.1,
        busy_seconds: (0..split.len())
            .map(|s| per_stage(s).map(|r| r.busy_seconds).sum::<f64>() / outputs.len().max(1) as f64)
            .collect(),
        split,
    }
}

fn main() -> Result<(), String> {
    let steps = env_or("MEGAGRAPH_BENCH_STEPS", 5).max(1);
    let seq_len = env_or("MEGAGRAPH_BENCH_SEQ_LEN", 512);
    let shape = shape();
    let layers = shape.layers;
    println!(
        "table_one bench: {layers} layers, {} heads, hidden {}, edge encoding over {} edge features and {} hops, \
         {SEQUENCES_PER_STEP} sequences x {seq_len} nodes per step in {} micro-batches, \
         pp = 2, {steps} measured steps after 1 warm-up",
        shape.heads,
        shape.hidden,
        shape.edge_feature_dim,
        shape.edge_hops(),
        micro_batches()
    );
    let cluster =
        ClusterSpec::from_toml_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/clusters/cpu-local.toml"))
            .map_err(|e| e.to_string())?;
    let workload = Workload {
        seq_len,
        sequences_per_step: SEQUENCES_PER_STEP,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let q = SEQUENCES_PER_STEP / micro_batches();
    let options = ProfilerOptions {
        ladder: ProfileLadder {
            rows: vec![seq_len / 4, seq_len / 2, seq_len],
            blocks: vec![seq_len / 4, seq_len / 2, seq_len],
            attention_batches: if q > 1 { vec![1, q] } else { vec![1] },
            max_attention_pairs: 0,
        },
        warmup: 1,
        repeats: 3,
        concurrency: 2,
        seed: 7,
        evict_bytes: 0,
    };
    let device = Default::default();
    let profile = measure_profile::<B>(
        &shape,
        "flex",
        &cluster.device,
        &device,
        Arc::new(ThreadAllocatorMeter),
        &options,
        &mut |_| {},
    )
    .map_err(|e| e.to_string())?;
    println!("{profile}");
    let balanced = planner_split(&shape, &workload, &cluster, &profile)?;
    let naive = vec![layers / 2, layers - layers / 2];
    println!("planner's pp = 2 split: {balanced:?} (naive: {naive:?})");
    // the same profile and links, each rank on a device of its own
    let dedicated_cluster = ClusterSpec {
        backward_waits_for_other_ranks: false,
        ..cluster.clone()
    };
    let dedicated_profile = megagraph_planner::ProfileTable {
        solo: None,
        ..profile.clone()
    };
    let predict = |cluster: &ClusterSpec, profile: &megagraph_planner::ProfileTable, split: &[usize]| {
        let evaluation = evaluate(
            cluster,
            &shape,
            &workload,
            profile,
            &pipeline(split),
            &SearchOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        Ok::<_, String>((
            evaluation.plan.predicted.step_seconds,
            evaluation.memory.iter().map(|m| m.total()).collect(),
        ))
    };
    let measured = measure(&shape, seq_len, &[&naive, &balanced], steps)?;
    let mut rows = Vec::new();
    for ((split, label), outputs) in [(naive, "naive (even)"), (balanced, "balanced (planner)")]
        .into_iter()
        .zip(measured)
    {
        let predicted = predict(&cluster, &profile, &split)?;
        let dedicated = predict(&dedicated_cluster, &dedicated_profile, &split)?.0;
        rows.push(Row {
            dedicated_seconds: dedicated,
            ..row(split, label, &outputs, predicted)
        });
    }
    println!(
        "\n| split | layers per stage | s / step (median) | predicted s / step | predicted, dedicated devices | busy s / step (stage 0, 1) | peak MiB (stage 0, 1) | predicted peak MiB (stage 0, 1) |\n\
         |---|---|---:|---:|---:|---|---|---|"
    );
    for r in &rows {
        let pair = |values: Vec<String>| values.join(", ");
        println!(
            "| {} | {:?} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
            r.label,
            r.split,
            r.step_seconds,
            r.predicted_seconds,
            r.dedicated_seconds,
            pair(r.busy_seconds.iter().map(|s| format!("{s:.3}")).collect()),
            pair(r.peak_bytes.iter().map(|b| format!("{:.1}", *b as f64 / MIB)).collect()),
            pair(
                r.predicted_peak_bytes
                    .iter()
                    .map(|b| format!("{:.1}", *b as f64 / MIB))
                    .collect()
            ),
        );
    }
    if let [naive, balanced] = rows.as_slice() {
        println!(
            "\nbalanced vs naive: {:.2}x faster per step measured ({:.2}x predicted, {:.2}x predicted on dedicated \
             devices); planner picks {:?}",
            naive.step_seconds / balanced.step_seconds,
            naive.predicted_seconds / balanced.predicted_seconds,
            naive.dedicated_seconds / balanced.dedicated_seconds,
            balanced.split
        );
    }
    Ok(())
}

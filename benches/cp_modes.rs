//! Context parallelism, the graph-aware ring against Ulysses, side by side in one run: per-rank
//! peak memory, time per optimizer step and bytes each rank sends to its context group per
//! step, for `cp` in {2, 4} at `S` in {4096, 16384}.
//!
//! The model: 1 layer, 8 heads, hidden 64 (FFN 64), 16 random input features, 16 classes,
//! distances up to 4 (6 buckets), a dense `u8` distance index; one sequence per step
//! (`pp = dp = micro_batches = 1`), so every rank is one context position. Each configuration
//! runs 1 warm-up step and `MEGAGRAPH_BENCH_STEPS` measured steps (default 2); the table reports
//! the median step time, the largest per-rank peak (counted per worker thread by
//! [`CountingAllocator`]) and the mean bytes a rank sent per step (counted by the ring and
//! Ulysses endpoints), next to what the planner's model predicts a rank sends
//! ([`ContextExchange`]; the ring also sends its blocks' key masks, and Ulysses gathers the
//! key mask once per micro-batch, which the model leaves out).
//!
//! Run: `cargo bench --bench cp_modes`. `MEGAGRAPH_BENCH_SEQ_LENS=4096,16384` and
//! `MEGAGRAPH_BENCH_CPS=2,4` choose the sizes. The Markdown table goes to stdout and the
//! figures, as JSON, to `$CARGO_TARGET_DIR/cp_modes.json` (default `target/cp_modes.json`).
//! Ranks run as threads of one CPU (Flex), so step times compare the two modes' work and
//! overheads on the same cores, not the speed-up of separate devices.

use std::sync::Arc;
use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use megagraph_calibrate::{SyntheticSource, init_model};
use megagraph_parallel::{CountingAllocator, CpMode, ParallelConfig, ParallelTrainer, StepOutput, TrainerOptions};
use megagraph_planner::{ContextExchange, ContextGroup, LinkSpec, ModelShape, StagePass};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

type B = Autodiff<Flex>;

/// The benchmarked model.
fn shape() -> ModelShape {
    ModelShape {
        layers: 1,
        heads: 8,
        hidden: 64,
        ffn_hidden: 64,
        feature_dim: 16,
        num_classes: 16,
        distance_buckets: 6,
        degree_buckets: 65,
        key_tile: 128,
        edge_feature_dim: 0,
    }
}

/// What one configuration measured.
struct Measured {
    seq_len: usize,
    cp: usize,
    mode: CpMode,
    /// Median seconds per step.
    step_seconds: f64,
    /// The largest peak bytes of any rank over the measured steps.
    peak_bytes: usize,
    /// Mean bytes one rank sent to its context group per step.
    sent_bytes: f64,
    /// The planner's prediction of `sent_bytes`.
    predicted_sent_bytes: f64,
}

fn usize_list(variable: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(variable)
        .ok()
        .map(|text| {
            text.split(',')
                .filter_map(|v| v.trim().parse().ok())
                .collect::<Vec<usize>>()
        })
        .filter(|list| !list.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

/// Bytes one rank sends per step by the planner's model: one sequence, `layers` layers.
fn predicted_sent_bytes(shape: &ModelShape, seq_len: usize, cp: usize, mode: CpMode) -> f64 {
    let group = ContextGroup {
        ranks: cp,
        block_bytes: (seq_len / cp * shape.hidden * 4) as f64,
        block_compute: StagePass::default(),
        link: LinkSpec {
            bandwidth_bytes_per_second: 1.0,
            latency_seconds: 0.0,
        },
    };
    shape.layers as f64 * ContextExchange::new(mode, &group).bytes_per_layer()
}

fn run(seq_len: usize, cp: usize, mode: CpMode, steps: usize) -> Result<Measured, String> {
    let shape = shape();
    let device = Default::default();
    let config = ParallelConfig::uniform(1, cp, 1, 1, shape.layers)
        .map_err(|e| e.to_string())?
        .with_cp_mode(mode);
    let options = TrainerOptions::new(seq_len, 1)
        .with_optimizer(AdamWConfig::new())
        .with_timeout(Duration::from_secs(3600));
    let mut trainer = ParallelTrainer::<B>::new(
        config,
        init_model(&shape, &device),
        Arc::new(SyntheticSource::new(&shape, seq_len, 7)),
        options,
        vec![device],
    )
    .map_err(|e| e.to_string())?;
    let mut outputs: Vec<StepOutput> = Vec::new();
    for step in 0..=steps {
        let output = trainer.step(&[step], 1e-3).map_err(|e| e.to_string())?;
        if step > 0 {
            outputs.push(output);
        }
    }
    let mut seconds: Vec<f64> = outputs.iter().map(|o| o.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let reports = outputs.iter().flat_map(|o| &o.ranks);
    let peak_bytes = reports.clone().filter_map(|r| r.peak_bytes).max().unwrap_or(0);
    let sent: Vec<u64> = reports.map(|r| r.context_sent_bytes).collect();
    Ok(Measured {
        seq_len,
        cp,
        mode,
        step_seconds: seconds.get(seconds.len() / 2).copied().unwrap_or(f64::NAN),
        peak_bytes,
        sent_bytes: sent.iter().sum::<u64>() as f64 / sent.len().max(1) as f64,
        predicted_sent_bytes: predicted_sent_bytes(&shape, seq_len, cp, mode),
    })
}

const MIB: f64 = 1024.0 * 1024.0;

/// The Markdown table: one row per configuration, and Ulysses' ratios to the ring beside it.
fn table(rows: &[Measured]) -> String {
    let mut out = String::from(
        "| S | cp | mode | peak / rank (MiB) | s / step | sent / rank / step (MiB) | model (MiB) | vs ring: peak, time, sent |\n\
         |---:|---:|---|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let ring = rows
            .iter()
            .find(|r| r.seq_len == row.seq_len && r.cp == row.cp && r.mode == CpMode::Ring);
        let ratios = match (row.mode, ring) {
            (CpMode::Ulysses, Some(ring)) => format!(
                "{:.2}x, {:.2}x, {:.2}x",
                row.peak_bytes as f64 / ring.peak_bytes.max(1) as f64,
                row.step_seconds / ring.step_seconds,
                row.sent_bytes / ring.sent_bytes.max(1.0)
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.3} | {:.2} | {:.2} | {} |\n",
            row.seq_len,
            row.cp,
            row.mode,
            row.peak_bytes as f64 / MIB,
            row.step_seconds,
            row.sent_bytes / MIB,
            row.predicted_sent_bytes / MIB,
            ratios
        ));
    }
    out
}

fn json(rows: &[Measured], steps: usize) -> serde_json::Value {
    let shape = shape();
    serde_json::json!({
        "model": {"layers": shape.layers, "heads": shape.heads, "hidden": shape.hidden, "ffn": shape.ffn_hidden,
                  "features": shape.feature_dim, "classes": shape.num_classes},
        "measured_steps": steps,
        "rows": rows.iter().map(|r| serde_json::json!({
            "seq_len": r.seq_len,
            "cp": r.cp,
            "cp_mode": r.mode,
            "median_step_seconds": r.step_seconds,
            "peak_bytes_per_rank": r.peak_bytes,
            "sent_bytes_per_rank_per_step": r.sent_bytes,
            "predicted_sent_bytes_per_rank_per_step": r.predicted_sent_bytes,
        })).collect::<Vec<_>>(),
    })
}

fn main() -> Result<(), String> {
    let steps = usize_list("MEGAGRAPH_BENCH_STEPS", &[2])[0].max(1);
    let seq_lens = usize_list("MEGAGRAPH_BENCH_SEQ_LENS", &[4096, 16384]);
    let cps = usize_list("MEGAGRAPH_BENCH_CPS", &[2, 4]);
    let shape = shape();
    println!(
        "cp_modes bench: {} layer(s), {} heads, hidden {}, 1 sequence per step, {steps} measured steps after 1 warm-up",
        shape.layers, shape.heads, shape.hidden
    );
    let mut rows = Vec::new();
    for &seq_len in &seq_lens {
        for &cp in &cps {
            for mode in CpMode::ALL {
                let measured = run(seq_len, cp, mode, steps)?;
                println!(
                    "S = {seq_len} cp = {cp} {mode}: {:.3} s per step, peak {:.1} MiB per rank, {:.2} MiB sent per rank",
                    measured.step_seconds,
                    measured.peak_bytes as f64 / MIB,
                    measured.sent_bytes / MIB
                );
                rows.push(measured);
            }
        }
    }
    println!("\n{}", table(&rows));
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = std::path::Path::new(&dir).join("cp_modes.json");
    let text = serde_json::to_string_pretty(&json(&rows, steps)).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("written {}", path.display());
    Ok(())
}

//! Time per optimizer step and per-rank peak memory of a few meshes on a CPU-scaled MegaGraph
//! shape (a featureless graph with learned node embeddings, so stage 0 carries a heavy
//! embedding stage):
//!
//! - `(1,1,1)`: one rank;
//! - `(1,2,1)`: context parallelism, each sequence split in two ring blocks;
//! - `(1,1,1)` with the pipelines' micro-batches (gradient accumulation on one rank);
//! - `(2,1,1)` with the uniform split of the 8 layers (`[4,4]`, naive) and with one and two
//!   layers moved off stage 0, which also holds the embedding stage; the balanced split is the
//!   one whose busiest stage works least, reported at the end.
//!
//! Run: `cargo bench --bench mesh` (`MEGAGRAPH_BENCH_STEPS` sets the
//! measured steps, default 3, after one warm-up step). `MEGAGRAPH_BENCH_FEATURES=F` gives the
//! nodes `F` random input features instead of learned embeddings: the input linear `[F -> 64]`
//! then makes the embedding stage compute-heavy (at `F = 4096` about three layers' worth), the
//! case the heterogeneous split is for. Peak memory is counted per worker thread
//! by [`CountingAllocator`]; ranks run as threads on the same CPU, so times show the overhead
//! and balance of a schedule, not the speed-up of separate devices.

use std::sync::Arc;
use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use megagraph_kernels::DistanceBias;
use megagraph_models::{GraphBatch, GraphTransformer, GraphTransformerConfig, NodeInput, materialize};
use megagraph_parallel::{
    BatchSource, CountingAllocator, CpMode, ParallelConfig, ParallelTrainer, StepOutput, TrainBatch,
    TrainerOptions,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

type B = Autodiff<Flex>;

/// The CPU-scaled shape: the paper's width and heads over fewer layers and shorter sequences.
const NUM_NODES: usize = 50_000;
const HIDDEN: usize = 64;
const HEADS: usize = 8;
const LAYERS: usize = 8;
const SEQ_LEN: usize = 256;
const SEQUENCES_PER_STEP: usize = 8;
const MICRO_BATCHES: usize = 4;
const CLASSES: usize = 16;
const MAX_DISTANCE: u8 = 4;

/// Deterministic synthetic sequences: random node ids (or `feature_dim` random features),
/// degrees, distance buckets and labels.
struct Sequences {
    feature_dim: Option<usize>,
}

/// One SplitMix64 step from `z`.
fn mix(z: u64) -> u64 {
    megagraph_graph::hash::splitmix64(z.wrapping_add(megagraph_graph::hash::GOLDEN))
}

impl<Bk: Backend> BatchSource<Bk> for Sequences {
    fn batch(&self, sequences: &[usize], device: &Bk::Device) -> Result<TrainBatch<Bk>, String> {
        let (n, s) = (sequences.len(), SEQ_LEN);
        let value = |seq: usize, field: u64, i: usize, modulo: u64| {
            mix((seq as u64) << 40 ^ field << 32 ^ i as u64) % modulo
        };
        let per_node = |field: u64, modulo: u64| -> Vec<i64> {
            sequences
                .iter()
                .flat_map(|&q| (0..s).map(move |i| value(q, field, i, modulo) as i64))
                .collect()
        };
        let buckets = MAX_DISTANCE as u64 + 2;
        let distance: Vec<u8> = sequences
            .iter()
            .flat_map(|&q| {
                (0..s * s).map(move |j| {
                    if j / s == j % s {
                        0
                    } else {
                        1 + value(q, 4, j, buckets - 1) as u8
                    }
                })
            })
            .collect();
        let weight: Vec<f32> = per_node(6, 2).into_iter().map(|w| w as f32).collect();
        let ints = |v: Vec<i64>| Tensor::from_data(TensorData::new(v, [n, s]), device);
        let input = match self.feature_dim {
            None => NodeInput::Ids(ints(per_node(1, NUM_NODES as u64))),
            Some(f) => {
                let values: Vec<f32> = sequences
                    .iter()
                    .flat_map(|&q| (0..s * f).map(move |j| value(q, 7, j, 2001) as f32 / 1000.0 - 1.0))
                    .collect();
                NodeInput::Features(Tensor::from_data(TensorData::new(values, [n, s, f]), device))
            }
        };
        Ok(TrainBatch {
            graph: GraphBatch {
                input,
                in_degree: ints(per_node(2, 64)),
                out_degree: ints(per_node(3, 64)),
                distance: DistanceBias::<Bk>::index_from_u8(distance, [n, s, s], device)
                    .map(Into::into)
                    .map_err(|e| e.to_string())?,
                padding: Tensor::<Bk, 2>::zeros([n, s], device).equal_elem(1.0),
                edge_paths: None,
                label_input: None,
            },
            labels: ints(per_node(5, CLASSES as u64)),
            train_weight: Tensor::from_data(TensorData::new(weight, [n, s]), device),
        })
    }

    fn train_nodes(&self, sequences: &[usize]) -> usize {
        sequences
            .iter()
            .map(|&q| {
                (0..SEQ_LEN)
                    .filter(|&i| mix((q as u64) << 40 ^ 6 << 32 ^ i as u64) % 2 == 1)
                    .count()
            })
            .sum()
    }
}

fn model(feature_dim: Option<usize>) -> GraphTransformer<Flex> {
    let device = Default::default();
    Flex::seed(&device, 1);
    let model: GraphTransformer<Flex> = GraphTransformerConfig::new(NUM_NODES, CLASSES)
        .with_feature_dim(feature_dim)
        .with_num_layers(LAYERS)
        .with_num_heads(HEADS)
        .with_hidden(HIDDEN)
        .with_ffn_hidden(HIDDEN)
        .with_dropout(0.0)
        .with_input_dropout(0.0)
        .with_max_distance(MAX_DISTANCE)
        .with_block_size(128)
        .init(&device);
    materialize(model)
}

/// One configuration's measurements.
struct Measured {
    name: String,
    times: Vec<f64>,
    /// Per rank: (coordinates, max peak bytes, mean busy seconds).
    ranks: Vec<(String, usize, f64)>,
    loss: f64,
}

fn run(
    name: &str,
    config: ParallelConfig,
    steps: usize,
    feature_dim: Option<usize>,
) -> Result<Measured, String> {
    let options = TrainerOptions::new(SEQ_LEN, SEQUENCES_PER_STEP)
        .with_optimizer(AdamWConfig::new().with_weight_decay(0.01))
        .with_timeout(Duration::from_secs(600));
    let mut trainer = ParallelTrainer::<B>::new(
        config,
        model(feature_dim),
        Arc::new(Sequences { feature_dim }),
        options,
        vec![Default::default()],
    )
    .map_err(|e| e.to_string())?;
    let mut outputs: Vec<StepOutput> = Vec::new();
    for step in 0..=steps {
        let sequences: Vec<usize> =
            (step * SEQUENCES_PER_STEP..(step + 1) * SEQUENCES_PER_STEP).collect();
        let output = trainer.step(&sequences, 1e-3).map_err(|e| e.to_string())?;
        if step > 0 {
            outputs.push(output);
        }
    }
    let world = outputs.first().map_or(0, |o| o.ranks.len());
    let ranks = (0..world)
        .map(|r| {
            let reports: Vec<_> = outputs.iter().map(|o| &o.ranks[r]).collect();
            let c = reports[0].coord;
            let peak = reports
                .iter()
                .filter_map(|r| r.peak_bytes)
                .max()
                .unwrap_or(0);
            let busy = reports.iter().map(|r| r.busy_seconds).sum::<f64>() / reports.len() as f64;
            (
                format!(
                    "rank {r} (stage {} cp {} dp {})",
                    c.stage, c.cp_rank, c.dp_rank
                ),
                peak,
                busy,
            )
        })
        .collect();
    Ok(Measured {
        name: name.to_string(),
        times: outputs.iter().map(|o| o.seconds).collect(),
        ranks,
        loss: outputs.last().map_or(f64::NAN, |o| o.loss),
    })
}

fn print(m: &Measured) {
    let min = m.times.iter().copied().fold(f64::INFINITY, f64::min);
    let max = m.times.iter().copied().fold(0.0, f64::max);
    let mean = m.times.iter().sum::<f64>() / m.times.len().max(1) as f64;
    println!(
        "{:<34} time: [{:.3} s {:.3} s {:.3} s] per step   (last loss {:.4})",
        m.name, min, mean, max, m.loss
    );
    for (rank, peak, busy) in &m.ranks {
        println!(
            "    {rank:<28} peak {:>8.1} MiB   busy {:.3} s/step",
            *peak as f64 / (1024.0 * 1024.0),
            busy
        );
    }
}

fn main() -> Result<(), String> {
    let steps: usize = std::env::var("MEGAGRAPH_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let features: Option<usize> = std::env::var("MEGAGRAPH_BENCH_FEATURES")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&f| f > 0);
    let input = match features {
        Some(f) => format!("{f} input features"),
        None => "learned embeddings".to_string(),
    };
    println!(
        "mesh bench: {NUM_NODES} nodes ({input}), hidden {HIDDEN}, {HEADS} heads, \
         {LAYERS} layers, {SEQUENCES_PER_STEP} sequences x {SEQ_LEN} nodes per step, \
         {steps} measured steps after 1 warm-up"
    );
    let config = |pp: usize, cp: usize, micro: usize, stage_layers: Vec<usize>| ParallelConfig {
        pp,
        cp,
        dp: 1,
        micro_batches: micro,
        stage_layers,
        cp_mode: CpMode::Ring,
    };
    print(&run("mesh/(1,1,1)", config(1, 1, 1, vec![LAYERS]), steps, features)?);
    // the same micro-batches as the pipelines, on one rank (gradient accumulation)
    let name = format!("mesh/(1,1,1) {MICRO_BATCHES} micro-batches");
    print(&run(
        &name,
        config(1, 1, MICRO_BATCHES, vec![LAYERS]),
        steps,
        features,
    )?);
    print(&run("mesh/(1,2,1)", config(1, 2, 1, vec![LAYERS]), steps, features)?);
    let mut pipelines = Vec::new();
    let uniform = vec![LAYERS / 2; 2];
    for first in [LAYERS / 2, LAYERS / 2 - 1, LAYERS / 2 - 2] {
        let split = vec![first, LAYERS - first];
        let label = if split == uniform {
            " naive-uniform"
        } else {
            ""
        };
        let name = format!("mesh/(2,1,1) {split:?}{label}");
        let measured = run(
            &name,
            config(2, 1, MICRO_BATCHES, split.clone()),
            steps,
            features,
        )?;
        print(&measured);
        let busiest = measured.ranks.iter().map(|r| r.2).fold(0.0, f64::max);
        pipelines.push((split, busiest));
    }
    if let Some((split, busiest)) = pipelines.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        println!("balanced (2,1,1) split: {split:?} (busiest stage {busiest:.3} s/step)");
    }
    Ok(())
}

//! Ask the planner for a parallel plan on a simulated multi-GPU cluster and print its table:
//! the chosen `pp x cp x dp` layout, micro-batches and layer split, the runners-up and why the
//! other layouts were rejected.
//!
//! ```sh
//! cargo run --release --example plan_cluster                                   # 8 x H200, NVLink
//! cargo run --release --example plan_cluster -- --cluster configs/clusters/h200-4x8-infiniband-ndr.toml --seq-len 1048576
//! ```

use std::path::PathBuf;

use clap::Parser;
use megagraph::planner::{ClusterSpec, ModelShape, SearchOptions, Workload, plan_analytic};

/// Plan the MegaGraph paper's model (16 layers, 8 heads, hidden = FFN = 64) on a cluster.
#[derive(Parser)]
struct Args {
    /// Cluster description (TOML).
    #[arg(long, default_value = "configs/clusters/h200-8x-nvlink.toml")]
    cluster: PathBuf,
    /// Nodes per sequence.
    #[arg(long, default_value_t = 262_144)]
    seq_len: usize,
    /// Sequences per optimizer step.
    #[arg(long, default_value_t = 8)]
    sequences_per_step: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = ClusterSpec::from_toml_file(&args.cluster)?;
    let workload = Workload {
        seq_len: args.seq_len,
        sequences_per_step: args.sequences_per_step,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let report = plan_analytic(&cluster, &ModelShape::paper(), &workload, &SearchOptions::default())?;
    println!("{}", report.explain());
    let best = &report.best.layout;
    println!(
        "use it: MegaGraphTrainer::parallel(ParallelConfig {{ pp: {}, cp: {}, dp: {}, micro_batches: {}, stage_layers: {:?} }}, devices)",
        best.pp, best.cp, best.dp, best.micro_batches, best.stage_layers
    );
    Ok(())
}

use std::path::PathBuf;

use clap::Args;
use megagraph_models::ModelPreset;
use megagraph_planner::{ClusterSpec, ModelShape, SearchOptions, Workload, plan_analytic};

use super::ModelShapeArgs;
use crate::error::{Result, TrainError};
use crate::metrics::write_atomically;

/// Options of `megagraph plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Cluster description (TOML); see configs/clusters/.
    #[arg(long, value_name = "FILE.toml")]
    pub cluster: PathBuf,
    /// Model size preset: small or paper (16 layers, 8 heads, hidden = FFN = 64).
    #[arg(long, value_name = "NAME", default_value = "paper")]
    pub preset: String,
    /// Layer count and widths (override the preset).
    #[command(flatten)]
    pub shape: ModelShapeArgs,
    /// Width of the node features (default: ogbn-products').
    #[arg(long, value_name = "F", default_value_t = 100)]
    pub feature_dim: usize,
    /// Number of classes (default: ogbn-products').
    #[arg(long, value_name = "C", default_value_t = 47)]
    pub classes: usize,
    /// Nodes per sequence.
    #[arg(long, value_name = "S", default_value_t = 65_536)]
    pub seq_len: usize,
    /// Sequences per optimizer step.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub sequences_per_step: usize,
    /// Largest micro-batch count to consider.
    #[arg(long, value_name = "M", default_value_t = 64)]
    pub max_micro_batches: usize,
    /// Write `{best, candidates, rejected, search_seconds, ...}` as JSON.
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<PathBuf>,
}

impl PlanArgs {
    /// The model shape the flags describe.
    pub fn shape(&self) -> Result<ModelShape> {
        let preset = ModelPreset::from_name(&self.preset).ok_or_else(|| TrainError::InvalidConfig {
            field: "preset",
            reason: format!("must be one of {:?}", ModelPreset::ALL.map(|(n, _)| n)),
        })?;
        let base = preset.apply(megagraph_models::GraphTransformerConfig::new(1, self.classes));
        Ok(ModelShape::of(&megagraph_models::GraphTransformerConfig {
            num_layers: self.shape.layers.unwrap_or(base.num_layers),
            num_heads: self.shape.heads.unwrap_or(base.num_heads),
            hidden: self.shape.hidden.unwrap_or(base.hidden),
            ffn_hidden: self.shape.ffn_hidden.unwrap_or(base.ffn_hidden),
            feature_dim: Some(self.feature_dim),
            ..base
        }))
    }
}

/// `megagraph plan`: searches plans with a profile estimated from the cluster's compute hints,
/// prints the explanation and optionally writes the JSON report.
pub fn plan(args: &PlanArgs) -> Result<()> {
    let cluster = ClusterSpec::from_toml_file(&args.cluster).map_err(megagraph_planner::PlanError::from)?;
    let workload = Workload {
        seq_len: args.seq_len,
        sequences_per_step: args.sequences_per_step,
        dtype_bytes: 4,
    };
    let options = SearchOptions {
        max_micro_batches: args.max_micro_batches,
        ..SearchOptions::default()
    };
    let report = plan_analytic(&cluster, &args.shape()?, &workload, &options)?;
    println!("{}", report.explain());
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report).map_err(|err| TrainError::Output {
            path: path.clone(),
            source: std::io::Error::other(err),
        })?;
        write_atomically(path, &json)?;
        println!("plan written to {}", path.display());
    }
    Ok(())
}

//! [`TemporalTrainConfig`]: what a temporal training run reads, with TGL's defaults.

use std::path::PathBuf;

use megagraph_graph::temporal::{SamplerConfig, SamplingStrategy, SplitFractions};
use megagraph_models::temporal::{EmbeddingKind, TemporalModelConfig, TemporalPreset};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TemporalTrainError};
use crate::scheme::TemporalScheme;

/// Steps per worker in DepBloom's default window: a window of 8 × batch size × workers events
/// gives each worker about 8 batches of its shard in time order between reconciliations. On
/// CollegeMsg (TGN, 4 workers, 3 seeds, README) it kept 1.5 points more test AP than 4 steps.
pub const DEFAULT_WINDOW_STEPS: usize = 8;

/// Configuration of a temporal link-prediction run. Unset options take the model's TGL default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TemporalTrainConfig {
    /// The model. Default: TGN.
    pub model: TemporalPreset,
    /// Events per batch. Default: 600 (TGL).
    pub batch_size: usize,
    /// Intra-batch memory refinement (DepBloom's IMR(c)): each training batch runs as
    /// chronological chunks of `ceil(batch_size / refine)` events, and the memory and mails of
    /// the nodes a chunk touched are written before the next chunk reads them (one optimizer
    /// step per batch still). 1 = off (TGL).
    /// Default: 1.
    pub refine: usize,
    /// Events per validation and test batch; unset: `batch_size` (TGL). Fix it to compare
    /// runs that train with different batch sizes under one evaluation.
    pub eval_batch_size: Option<usize>,
    /// Training epochs at most. Default: 10.
    pub epochs: usize,
    /// Epochs without a better validation AP before stopping. Default: 3.
    pub patience: usize,
    /// Adam's learning rate. Default: 5e-4 (TGL uses 1e-4; at 5e-4 TGN reached a test AP of
    /// 0.971 on the featureless Wikipedia stream in 4 epochs).
    pub learning_rate: f64,
    /// Seed of the parameters, dropout, negatives and uniform sampling. Default: 0.
    pub seed: u64,
    /// Neighbours per hop for graph attention and DySAT; unset: `[10]`, `[10, 10]` for TGAT.
    pub fanouts: Option<Vec<usize>>,
    /// How neighbours are drawn; unset: most recent, uniform for TGAT (TGL's configs).
    pub sampling: Option<SamplingStrategy>,
    /// Width of memory, time encodings and embeddings. Default: 100 (TGL).
    pub dim: usize,
    /// Width of learned node inputs (a vector per node, trained with the model) on data
    /// without node features; 0 for none. Unset: `dim`. Without them a featureless stream
    /// gives the models no node identity besides what the memory accumulates.
    pub node_embedding: Option<usize>,
    /// Dropout. Default: 0.1 (TGL's 0.1–0.2).
    pub dropout: f64,
    /// Length of one DySAT snapshot in the stream's time unit; unset: a hundredth of the
    /// training events' time span.
    pub snapshot_span: Option<f64>,
    /// Negatives per test event for MRR (DistTGL: 49); 0 skips MRR. Default: 49.
    pub mrr_negatives: usize,
    /// The chronological split. Default: 70/15/15.
    pub split: SplitFractions,
    /// Where checkpoints go (one per epoch); unset: none.
    pub checkpoint_dir: Option<PathBuf>,
    /// Worker threads training together (each with its own device and model replica).
    /// Default: 1.
    #[serde(skip_serializing_if = "is_one")]
    pub workers: usize,
    /// How the workers share the run; unset: the single-worker loop (`workers` must be 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<TemporalScheme>,
    /// DepBloom's window in events; unset: [`DEFAULT_WINDOW_STEPS`] × `batch_size` × `workers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// DepBloom's critical-path optimization, for the workers of a `scheme`: after each step a
    /// worker writes the memory and mails of the nodes its next batch reads ("hot") at once,
    /// and hands the others ("cold") to a background thread, which completes them before the
    /// nodes' next read. Exact: it changes when the state is written, never a number.
    /// Unset: on for DepBloom, off for the baselines (mini-batch, epoch and memory
    /// parallelism, as DistTGL runs them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_path: Option<bool>,
}

/// Whether `value` is 1 (the default worker count, left out of checkpoint fingerprints).
fn is_one(value: &usize) -> bool {
    *value == 1
}

impl Default for TemporalTrainConfig {
    fn default() -> Self {
        Self {
            model: TemporalPreset::Tgn,
            batch_size: 600,
            refine: 1,
            eval_batch_size: None,
            epochs: 10,
            patience: 3,
            learning_rate: 5e-4,
            seed: 0,
            fanouts: None,
            sampling: None,
            dim: 100,
            node_embedding: None,
            dropout: 0.1,
            snapshot_span: None,
            mrr_negatives: 49,
            split: SplitFractions::default(),
            checkpoint_dir: None,
            workers: 1,
            scheme: None,
            window: None,
            critical_path: None,
        }
    }
}

impl TemporalTrainConfig {
    /// Checks ranges that do not depend on the data.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, reason: &str| {
            Err(TemporalTrainError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.batch_size == 0 {
            return invalid("batch-size", "must be at least 1");
        }
        if self.eval_batch_size == Some(0) {
            return invalid("eval-batch-size", "must be at least 1");
        }
        if self.refine == 0 || self.refine > self.batch_size {
            return invalid("refine", "must be between 1 and the batch size");
        }
        if self.workers == 0 {
            return invalid("workers", "must be at least 1");
        }
        if self.workers > 1 && self.scheme.is_none() {
            return invalid("scheme", "must be given for more than one worker");
        }
        if self.critical_path == Some(true) && self.scheme.is_none() {
            return invalid("critical-path", "applies to the workers of a scheme: give one");
        }
        if self.window == Some(0) {
            return invalid("window", "must be at least 1 event");
        }
        if self.epochs == 0 {
            return invalid("epochs", "must be at least 1");
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return invalid("lr", "must be a positive number");
        }
        if self.dim == 0 || !self.dim.is_multiple_of(2) {
            return invalid("dim", "must be a positive multiple of the 2 attention heads");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return invalid("dropout", "must be in [0, 1)");
        }
        if self.fanouts.as_ref().is_some_and(|f| f.is_empty() || f.contains(&0)) {
            return invalid("fanouts", "must list at least one hop, each of at least 1 neighbour");
        }
        if self.snapshot_span.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return invalid("snapshot-span", "must be a positive time span");
        }
        if self.node_embedding.is_some_and(|d| !d.is_multiple_of(2)) {
            return invalid("node-embedding", "must be a multiple of the 2 attention heads");
        }
        Ok(())
    }

    /// The hops the model reads: graph attention's `layers` hops, DySAT's one fanout per
    /// snapshot, nothing for the identity embeddings.
    pub fn sampler(&self) -> SamplerConfig {
        let default_fanouts = match self.model {
            TemporalPreset::Tgat => vec![10, 10],
            _ => vec![10],
        };
        let default_strategy = match self.model {
            TemporalPreset::Tgat => SamplingStrategy::Uniform,
            _ => SamplingStrategy::Recent,
        };
        SamplerConfig {
            fanouts: self.fanouts.clone().unwrap_or(default_fanouts),
            strategy: self.sampling.unwrap_or(default_strategy),
            seed: self.seed,
        }
    }

    /// DepBloom's window in events: `window`, else [`DEFAULT_WINDOW_STEPS`] × `batch_size` ×
    /// `workers`.
    pub fn window_events(&self) -> usize {
        self.window.unwrap_or(DEFAULT_WINDOW_STEPS * self.batch_size * self.workers)
    }

    /// Whether the workers defer cold memory write-backs off the critical path:
    /// `critical_path`, else on for DepBloom only; never without a scheme.
    pub fn defers_write_back(&self) -> bool {
        self.scheme.is_some() && self.critical_path.unwrap_or(self.scheme == Some(TemporalScheme::Depbloom))
    }

    /// Width of the learned node inputs on data without node features.
    pub fn node_embedding_dim(&self) -> usize {
        self.node_embedding.unwrap_or(self.dim)
    }

    /// The model for a stream of `num_nodes` nodes with `dim_edge`-wide edge features and no
    /// node features.
    pub fn model_config(&self, num_nodes: usize, dim_edge: usize) -> TemporalModelConfig {
        let learned = self.node_embedding_dim();
        let config = self
            .model
            .config(learned, dim_edge)
            .with_dim_memory(self.dim)
            .with_dim_time(self.dim)
            .with_dim_out(self.dim)
            .with_dropout(self.dropout)
            .with_embedded_nodes(if learned > 0 { num_nodes } else { 0 });
        if config.embedding == EmbeddingKind::Attention {
            let layers = self.sampler().fanouts.len();
            config.with_layers(layers)
        } else {
            config
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_take_tgl_defaults_and_bad_values_name_their_field() {
        let tgat = TemporalTrainConfig {
            model: TemporalPreset::Tgat,
            ..Default::default()
        };
        assert_eq!(tgat.sampler().fanouts, vec![10, 10]);
        assert_eq!(tgat.sampler().strategy, SamplingStrategy::Uniform);
        assert_eq!(tgat.model_config(50, 0).layers, 2);
        assert_eq!(tgat.model_config(50, 0).embedded_nodes, 50);
        let tgn = TemporalTrainConfig::default();
        assert_eq!(tgn.sampler().fanouts, vec![10]);
        assert_eq!(tgn.model_config(50, 3).embedded_nodes, 50);
        let without = TemporalTrainConfig { node_embedding: Some(0), ..Default::default() };
        assert!(!tgn.defers_write_back());
        let depbloom = TemporalTrainConfig { scheme: Some(TemporalScheme::Depbloom), ..Default::default() };
        assert!(depbloom.defers_write_back());
        assert!(!TemporalTrainConfig { critical_path: Some(false), ..depbloom }.defers_write_back());
        let minibatch = TemporalTrainConfig { scheme: Some(TemporalScheme::Minibatch), ..Default::default() };
        assert!(!minibatch.defers_write_back());
        assert!(TemporalTrainConfig { critical_path: Some(true), ..minibatch }.defers_write_back());
        assert_eq!(without.model_config(50, 3).embedded_nodes, 0);
        assert_eq!(tgn.model_config(50, 3).dim_edge, 3);
        for (config, field) in [
            (TemporalTrainConfig { batch_size: 0, ..Default::default() }, "batch-size"),
            (TemporalTrainConfig { dim: 3, ..Default::default() }, "dim"),
            (TemporalTrainConfig { refine: 0, ..Default::default() }, "refine"),
            (TemporalTrainConfig { batch_size: 4, refine: 5, ..Default::default() }, "refine"),
            (TemporalTrainConfig { fanouts: Some(vec![]), ..Default::default() }, "fanouts"),
            (TemporalTrainConfig { learning_rate: -1.0, ..Default::default() }, "lr"),
            (TemporalTrainConfig { workers: 0, ..Default::default() }, "workers"),
            (TemporalTrainConfig { workers: 2, ..Default::default() }, "scheme"),
            (TemporalTrainConfig { window: Some(0), ..Default::default() }, "window"),
            (TemporalTrainConfig { critical_path: Some(true), ..Default::default() }, "critical-path"),
        ] {
            match config.validate() {
                Err(TemporalTrainError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}

//! The flags `megagraph temporal train` and `megagraph temporal compare` share: the model, the
//! training options and where the event stream comes from.

use std::path::PathBuf;

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use megagraph_graph::temporal::InteractionConfig;
use megagraph_models::temporal::TemporalPreset;
use megagraph_temporal::{TemporalDataset, TemporalScheme, TemporalSource, TemporalTrainConfig};

use crate::cli::error::{CliError, Result};

/// The training flags `train` and `compare` share.
#[derive(Debug, Args)]
pub struct TemporalOptions {
    /// The model.
    #[arg(long, value_name = "NAME", default_value = "tgn", value_parser = temporal_preset_parser())]
    pub model: TemporalPreset,
    /// The event stream.
    #[command(flatten)]
    pub data: TemporalDataArgs,
    /// Events per batch (600).
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Intra-batch memory refinement IMR(C): each training batch runs as C chronological
    /// chunks, later chunks reading the memory earlier ones wrote (1 = off). `auto` (train with
    /// --scheme depbloom): the planner's count, from a profile measured first.
    #[arg(long, value_name = "C")]
    pub refine: Option<CountOrAuto>,
    /// Events per validation and test batch (the training batch size).
    #[arg(long, value_name = "N")]
    pub eval_batch_size: Option<usize>,
    /// Training epochs at most (10).
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// Epochs without a better validation AP before stopping (3).
    #[arg(long, value_name = "N")]
    pub patience: Option<usize>,
    /// Adam's learning rate (5e-4).
    #[arg(long, value_name = "LR")]
    pub lr: Option<f64>,
    /// Width of memory, time encodings, embeddings and learned node inputs (100).
    #[arg(long, value_name = "D")]
    pub dim: Option<usize>,
    /// Width of the learned vector per node on data without node features; 0: none (--dim).
    #[arg(long, value_name = "D")]
    pub node_embedding: Option<usize>,
    /// Dropout (0.1).
    #[arg(long, value_name = "P")]
    pub dropout: Option<f64>,
    /// Negatives per test event for MRR; 0: no MRR (49).
    #[arg(long, value_name = "K")]
    pub mrr_negatives: Option<usize>,
    /// Seed of parameters, dropout, negatives and sampling (0).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// DepBloom's window in events (8 × batch size × workers). `auto` (train with --scheme
    /// depbloom): the planner's window, from a profile measured first.
    #[arg(long, value_name = "W")]
    pub window: Option<CountOrAuto>,
    /// Write every memory write-back on the critical path. By default DepBloom's workers write
    /// only the memory of the nodes their next batch reads at once and defer the rest to a
    /// background thread (exact: the numbers do not change); the other schemes never defer.
    #[arg(long)]
    pub no_critical_path: bool,
}

/// A count on the command line, or `auto`: the DepBloom planner's suggestion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountOrAuto {
    /// Planned from a profile measured before training (`megagraph temporal plan`).
    Auto,
    /// This count.
    Count(usize),
}

impl std::str::FromStr for CountOrAuto {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        if text == "auto" {
            return Ok(Self::Auto);
        }
        text.parse().map(Self::Count).map_err(|err| format!("{err}: expected a count or `auto`"))
    }
}

impl CountOrAuto {
    /// The count, unless planned.
    pub fn count(self) -> Option<usize> {
        match self {
            Self::Auto => None,
            Self::Count(count) => Some(count),
        }
    }
}

/// Where the event stream comes from: one data flag, or the synthetic stream.
#[derive(Debug, Args)]
pub struct TemporalDataArgs {
    /// A dataset directory in the shared temporal layout (edges.csv.gz + meta.json).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["jodie", "tgl"])]
    pub dataset: Option<PathBuf>,
    /// A JODIE raw CSV (user_id,item_id,timestamp,state_label,features...).
    #[arg(long, value_name = "FILE", conflicts_with = "tgl")]
    pub jodie: Option<PathBuf>,
    /// A TGL edges.csv (,src,dst,time,ext_roll).
    #[arg(long, value_name = "FILE")]
    pub tgl: Option<PathBuf>,
    /// Edge features of --tgl: one row of floats per event.
    #[arg(long, value_name = "FILE", requires = "tgl")]
    pub tgl_features: Option<PathBuf>,
    /// Events in the synthetic stream (without a data flag).
    #[arg(long, value_name = "N")]
    pub synthetic_events: Option<usize>,
}

/// `--scheme`: one of [`TemporalScheme::ALL`] by name.
pub(in crate::cli) fn temporal_scheme_parser() -> impl TypedValueParser<Value = TemporalScheme> {
    PossibleValuesParser::new(TemporalScheme::ALL.map(|(name, _)| name))
        // the names were checked against the same list
        .map(|name| TemporalScheme::from_name(&name).unwrap_or(TemporalScheme::Minibatch))
}

/// `--model`: one of [`TemporalPreset::ALL`] by name.
pub(in crate::cli) fn temporal_preset_parser() -> impl TypedValueParser<Value = TemporalPreset> {
    PossibleValuesParser::new(TemporalPreset::ALL.map(|(name, _)| name))
        // the names were checked against the same list
        .map(|name| TemporalPreset::from_name(&name).unwrap_or(TemporalPreset::Tgn))
}

impl TemporalDataArgs {
    pub(in crate::cli) fn source(&self) -> Result<TemporalSource> {
        if self.synthetic_events.is_some() && (self.dataset.is_some() || self.jodie.is_some() || self.tgl.is_some()) {
            return Err(CliError::flag("synthetic-events", "only applies without --dataset, --jodie or --tgl"));
        }
        Ok(if let Some(dir) = &self.dataset {
            TemporalSource::Dir(dir.clone())
        } else if let Some(file) = &self.jodie {
            TemporalSource::Jodie(file.clone())
        } else if let Some(edges) = &self.tgl {
            TemporalSource::Tgl {
                edges: edges.clone(),
                features: self.tgl_features.clone(),
            }
        } else {
            let defaults = InteractionConfig::default();
            TemporalSource::Synthetic(InteractionConfig {
                num_events: self.synthetic_events.unwrap_or(defaults.num_events),
                ..defaults
            })
        })
    }
}

impl TemporalOptions {
    /// The first of `--window` and `--refine` given as `auto`, by flag name.
    pub(in crate::cli) fn planned_flag(&self) -> Option<&'static str> {
        [("window", self.window), ("refine", self.refine)]
            .into_iter()
            .find_map(|(flag, value)| (value == Some(CountOrAuto::Auto)).then_some(flag))
    }

    /// The flags given, over [`TemporalTrainConfig::default`] (the one place of the defaults).
    pub(in crate::cli) fn config(&self) -> TemporalTrainConfig {
        let defaults = TemporalTrainConfig::default();
        TemporalTrainConfig {
            model: self.model,
            batch_size: self.batch_size.unwrap_or(defaults.batch_size),
            refine: self.refine.and_then(CountOrAuto::count).unwrap_or(defaults.refine),
            eval_batch_size: self.eval_batch_size.or(defaults.eval_batch_size),
            epochs: self.epochs.unwrap_or(defaults.epochs),
            patience: self.patience.unwrap_or(defaults.patience),
            learning_rate: self.lr.unwrap_or(defaults.learning_rate),
            seed: self.seed.unwrap_or(defaults.seed),
            dim: self.dim.unwrap_or(defaults.dim),
            dropout: self.dropout.unwrap_or(defaults.dropout),
            mrr_negatives: self.mrr_negatives.unwrap_or(defaults.mrr_negatives),
            node_embedding: self.node_embedding.or(defaults.node_embedding),
            window: self.window.and_then(CountOrAuto::count).or(defaults.window),
            critical_path: if self.no_critical_path { Some(false) } else { defaults.critical_path },
            ..defaults
        }
    }
}

/// Loads the stream `data` names, split as `config` says, and tells what it holds.
pub(in crate::cli) fn load_announced(data: &TemporalDataArgs, config: &TemporalTrainConfig) -> Result<TemporalDataset> {
    let data = TemporalDataset::load(&data.source()?, config.split)?;
    eprintln!(
        "{}: {} nodes, {} events (train {}, valid {}, test {}); model {}",
        data.name,
        data.stream.num_nodes(),
        data.stream.len(),
        data.split.train.len(),
        data.split.valid.len(),
        data.split.test.len(),
        config.model.name()
    );
    Ok(data)
}

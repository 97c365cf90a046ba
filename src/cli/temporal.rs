//! `megagraph temporal`: temporal GNNs (TGN, JODIE, APAN, TGAT, DySAT) for link prediction.

use std::io::IsTerminal;
use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use indicatif::ProgressBar;
use megagraph_graph::temporal::{InteractionConfig, SplitFractions, WindowShards};
use megagraph_models::temporal::TemporalPreset;
use megagraph_temporal::{
    TemporalDataset, TemporalScheme, TemporalEpoch, TemporalObserver, TemporalReport, TemporalSource, TemporalTrainConfig,
    TemporalTrainError, TemporalTrainer, write_temporal_curves,
};

pub use super::temporal_compare::TemporalCompareArgs;
use super::error::{CliError, Result};
use super::progress_bar;

/// `megagraph temporal <COMMAND>`.
#[derive(Debug, Args)]
pub struct TemporalArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TemporalCommand,
}

/// The temporal subcommands.
#[derive(Debug, Subcommand)]
pub enum TemporalCommand {
    /// Train a temporal GNN for link prediction (TGL's protocol) and report test AP, AUC and MRR.
    ///
    /// With no data flag it trains on the built-in synthetic user-item stream.
    Train(Box<TemporalTrainArgs>),
    /// Shard an event stream over workers in windows (DepBloom's temporally bounded spatial
    /// partitioning) and report the cross-shard event ratio of sequential and topology-aware
    /// sharding for each window size.
    Shards(TemporalShardsArgs),
    /// Train one configuration under each parallel scheme and worker count, and report
    /// events/s, test AP, memory synchronized per epoch and time on the critical path per
    /// batch, as a Markdown table and JSON rows.
    Compare(Box<TemporalCompareArgs>),
}

/// `megagraph temporal shards`.
#[derive(Debug, Args)]
pub struct TemporalShardsArgs {
    /// The event stream.
    #[command(flatten)]
    pub data: TemporalDataArgs,
    /// Worker counts, comma-separated.
    #[arg(long, value_name = "N,..", value_delimiter = ',', default_value = "2,4")]
    pub workers: Vec<usize>,
    /// Window sizes in events, comma-separated.
    #[arg(long, value_name = "W,..", value_delimiter = ',', default_value = "600,2400,9600,38400")]
    pub windows: Vec<usize>,
    /// Seed of the locality partitioner.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Write the rows as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

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
    /// chunks, later chunks reading the memory earlier ones wrote (1 = off).
    #[arg(long, value_name = "C")]
    pub refine: Option<usize>,
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
    /// DepBloom's window in events (4 × batch size × workers).
    #[arg(long, value_name = "W")]
    pub window: Option<usize>,
}

/// `megagraph temporal train`.
#[derive(Debug, Args)]
pub struct TemporalTrainArgs {
    /// Model, data and training flags.
    #[command(flatten)]
    pub options: TemporalOptions,
    /// Worker threads training together, each with its own device and model replica (1).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: usize,
    /// How the workers share the run (needed above one worker): minibatch, epoch, memory or
    /// depbloom; without it, single-worker training.
    #[arg(long, value_name = "NAME", value_parser = temporal_scheme_parser())]
    pub scheme: Option<TemporalScheme>,
    /// Write a checkpoint (parameters, optimizer, best memory) after every epoch.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from the latest checkpoint in --checkpoint-dir.
    #[arg(long, requires = "checkpoint_dir")]
    pub resume: bool,
    /// Write the metrics as JSON.
    #[arg(long, value_name = "FILE")]
    pub metrics_out: Option<PathBuf>,
    /// Write loss.svg and ap.svg into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
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
pub(super) fn temporal_scheme_parser() -> impl TypedValueParser<Value = TemporalScheme> {
    PossibleValuesParser::new(TemporalScheme::ALL.map(|(name, _)| name))
        // the names were checked against the same list
        .map(|name| TemporalScheme::from_name(&name).unwrap_or(TemporalScheme::Minibatch))
}

/// `--model`: one of [`TemporalPreset::ALL`] by name.
pub(super) fn temporal_preset_parser() -> impl TypedValueParser<Value = TemporalPreset> {
    PossibleValuesParser::new(TemporalPreset::ALL.map(|(name, _)| name))
        // the names were checked against the same list
        .map(|name| TemporalPreset::from_name(&name).unwrap_or(TemporalPreset::Tgn))
}

impl TemporalDataArgs {
    pub(super) fn source(&self) -> Result<TemporalSource> {
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
    /// The flags given, over [`TemporalTrainConfig::default`] (the one place of the defaults).
    pub(super) fn config(&self) -> TemporalTrainConfig {
        let defaults = TemporalTrainConfig::default();
        TemporalTrainConfig {
            model: self.model,
            batch_size: self.batch_size.unwrap_or(defaults.batch_size),
            refine: self.refine.unwrap_or(defaults.refine),
            eval_batch_size: self.eval_batch_size.or(defaults.eval_batch_size),
            epochs: self.epochs.unwrap_or(defaults.epochs),
            patience: self.patience.unwrap_or(defaults.patience),
            learning_rate: self.lr.unwrap_or(defaults.learning_rate),
            seed: self.seed.unwrap_or(defaults.seed),
            dim: self.dim.unwrap_or(defaults.dim),
            dropout: self.dropout.unwrap_or(defaults.dropout),
            mrr_negatives: self.mrr_negatives.unwrap_or(defaults.mrr_negatives),
            node_embedding: self.node_embedding.or(defaults.node_embedding),
            window: self.window.or(defaults.window),
            ..defaults
        }
    }
}

impl TemporalTrainArgs {
    /// The run's configuration: the shared flags, the workers and where checkpoints go.
    fn config(&self) -> TemporalTrainConfig {
        TemporalTrainConfig {
            workers: self.workers,
            scheme: self.scheme,
            checkpoint_dir: self.checkpoint_dir.clone(),
            ..self.options.config()
        }
    }
}

/// Runs `megagraph temporal ...`.
pub fn temporal(args: &TemporalArgs) -> Result<()> {
    match &args.command {
        TemporalCommand::Train(args) => train(args),
        TemporalCommand::Shards(args) => shards(args),
        TemporalCommand::Compare(args) => super::temporal_compare::compare(args),
    }
}

/// Loads the stream `data` names, split as `config` says, and tells what it holds.
pub(super) fn load_announced(data: &TemporalDataArgs, config: &TemporalTrainConfig) -> Result<TemporalDataset> {
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

fn train(args: &TemporalTrainArgs) -> Result<()> {
    let config = args.config();
    let data = load_announced(&args.options.data, &config)?;
    let report = TemporalTrainer::new(&config, &data)
        .with_resume(args.resume)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Bars::new())?;
    print_report(&report);
    if let Some(path) = &args.metrics_out {
        report.write_json(path)?;
    }
    if let Some(dir) = &args.plot {
        write_temporal_curves(&report, dir)?;
    }
    Ok(())
}

fn shards(args: &TemporalShardsArgs) -> Result<()> {
    let events = match args.data.source()? {
        TemporalSource::Synthetic(config) => config.generate().map_err(TemporalTrainError::from)?.events,
        source => TemporalDataset::load(&source, SplitFractions::default())?.stream,
    };
    println!("{:>8} {:>8} {:>11} {:>9} {:>10}", "workers", "window", "sequential", "topology", "imbalance");
    let mut rows = Vec::new();
    for &workers in &args.workers {
        let ratios =
            WindowShards::compare(&events, workers, &args.windows, args.seed).map_err(TemporalTrainError::from)?;
        for ratio in ratios {
            println!(
                "{workers:>8} {:>8} {:>11.4} {:>9.4} {:>10.2}",
                ratio.window, ratio.sequential, ratio.topology, ratio.topology_imbalance
            );
            rows.push(serde_json::json!({
                "workers": workers,
                "window": ratio.window,
                "sequential": ratio.sequential,
                "topology": ratio.topology,
                "topology_imbalance": ratio.topology_imbalance,
            }));
        }
    }
    if let Some(path) = &args.json {
        megagraph_train::files::write_json_atomically(path, &rows)?;
    }
    Ok(())
}

pub(super) fn print_report(report: &TemporalReport) {
    println!("model      {} on {}", report.model, report.dataset);
    println!(
        "test       AP {:.4} (batch mean {:.4})  AUC {:.4}  MRR {}",
        report.test_ap,
        report.test_ap_batch_mean,
        report.test_auc,
        report
            .test_mrr
            .map_or_else(|| "-".to_string(), |mrr| format!("{mrr:.4} ({} negatives)", report.mrr_negatives))
    );
    println!(
        "valid      best AP {:.4} at epoch {} of {}",
        report.best_valid_ap, report.best_epoch, report.epochs_run
    );
    println!(
        "speed      {:.0} training events/s ({:.1} s of training)",
        report.events_per_second, report.train_seconds
    );
    if let Some(scheme) = report.scheme {
        println!(
            "workers    {} ({}): events per worker {:?}, {:.0} bytes of memory synchronized per epoch, {:.4} s per batch on the critical path",
            report.workers,
            scheme.name(),
            report.events_per_worker,
            report.sync_bytes_per_epoch,
            report.critical_path_seconds_per_batch
        );
    }
}

/// A bar per epoch and evaluation on a terminal, one line per epoch otherwise.
struct Bars {
    bar: Option<ProgressBar>,
    terminal: bool,
}

impl Bars {
    fn new() -> Self {
        Self {
            bar: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn start(&mut self, prefix: String, batches: usize) {
        if self.terminal {
            let bar = progress_bar(batches, "{prefix:>12} [{bar:30}] {pos}/{len} batches {msg}");
            bar.set_prefix(prefix);
            self.bar = Some(bar);
        }
    }
}

impl TemporalObserver for Bars {
    fn epoch_started(&mut self, epoch: usize, batches: usize) {
        self.start(format!("epoch {epoch}"), batches);
    }

    fn batch_finished(&mut self, loss: f64) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("loss {loss:.4}"));
            bar.inc(1);
        }
    }

    fn evaluation_started(&mut self, split: &'static str, batches: usize) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.start(split.to_string(), batches);
    }

    fn evaluation_batch_finished(&mut self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn epoch_finished(&mut self, e: &TemporalEpoch) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!(
            "epoch {:>3}  loss {:.4}  valid AP {:.4}  AUC {:.4}  {:.1}s",
            e.epoch, e.loss, e.valid_ap, e.valid_auc, e.seconds
        );
    }
}

//! `megagraph temporal`: temporal GNNs (TGN, JODIE, APAN, TGAT, DySAT) for link prediction.

use std::io::IsTerminal;
use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::{Args, Subcommand};
use indicatif::ProgressBar;
use megagraph_graph::temporal::{SplitFractions, WindowShards};
use megagraph_temporal::{
    TemporalDataset, TemporalEpoch, TemporalObserver, TemporalReport, TemporalScheme, TemporalSource,
    TemporalProfileOptions, TemporalTrainConfig, TemporalTrainError, TemporalTrainer, write_temporal_curves,
};
use megagraph_planner::temporal::plan_temporal;

pub(super) mod options;

pub use super::temporal_compare::TemporalCompareArgs;
pub use super::temporal_plan::TemporalPlanArgs;
use options::{CountOrAuto, TemporalDataArgs, TemporalOptions, load_announced, temporal_scheme_parser};
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
    /// Suggest DepBloom's window and intra-batch refinement count for a worker count and batch
    /// size from a profile measured on the dataset, and explain why.
    Plan(Box<TemporalPlanArgs>),
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
        TemporalCommand::Plan(args) => super::temporal_plan::plan(args),
    }
}

fn train(args: &TemporalTrainArgs) -> Result<()> {
    let mut config = args.config();
    let data = load_announced(&args.options.data, &config)?;
    if let Some(flag) = args.options.planned_flag() {
        if config.scheme != Some(TemporalScheme::Depbloom) {
            return Err(CliError::flag(flag, "`auto` is planned for --scheme depbloom only"));
        }
        let options = TemporalProfileOptions { workers: config.workers, ..TemporalProfileOptions::default() };
        let plan = plan_temporal(&super::temporal_plan::measure(&config, &data, &options)?)?;
        eprint!("{}", plan.explain());
        if args.options.window == Some(CountOrAuto::Auto) {
            config.window = Some(plan.window);
        }
        if args.options.refine == Some(CountOrAuto::Auto) {
            config.refine = plan.refine;
        }
    }
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

//! `megagraph temporal compare`: one configuration trained under each parallel scheme and
//! worker count, side by side in one run.

use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::Args;
use megagraph_temporal::{Quiet, TemporalReport, TemporalScheme, TemporalTrainConfig, TemporalTrainer};

use super::error::{CliError, Result};
use super::temporal::options::{TemporalOptions, load_announced, temporal_scheme_parser};

/// `megagraph temporal compare`.
#[derive(Debug, Args)]
pub struct TemporalCompareArgs {
    /// Model, data and training flags (the same for every run).
    #[command(flatten)]
    pub options: TemporalOptions,
    /// Worker counts, comma-separated.
    #[arg(long, value_name = "N,..", value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// Schemes, comma-separated.
    #[arg(
        long,
        value_name = "NAME,..",
        value_delimiter = ',',
        default_value = "minibatch,epoch,memory,depbloom",
        value_parser = temporal_scheme_parser()
    )]
    pub schemes: Vec<TemporalScheme>,
    /// Write the rows as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// One run of the grid.
#[derive(Debug, Clone)]
struct CompareRow {
    dataset: String,
    model: String,
    scheme: TemporalScheme,
    workers: usize,
    events_per_second: f64,
    test_ap: f64,
    sync_bytes_per_epoch: f64,
    critical_path_seconds_per_batch: f64,
    critical_path: bool,
    events_per_worker: Vec<usize>,
    epochs_run: usize,
}

impl CompareRow {
    fn new(report: &TemporalReport, scheme: TemporalScheme) -> Self {
        Self {
            dataset: report.dataset.clone(),
            model: report.model.clone(),
            scheme,
            workers: report.workers,
            events_per_second: report.events_per_second,
            test_ap: report.test_ap,
            sync_bytes_per_epoch: report.sync_bytes_per_epoch,
            critical_path_seconds_per_batch: report.critical_path_seconds_per_batch,
            critical_path: report.critical_path,
            events_per_worker: report.events_per_worker.clone(),
            epochs_run: report.epochs_run,
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "dataset": self.dataset,
            "model": self.model,
            "scheme": self.scheme.name(),
            "workers": self.workers,
            "events_per_second": self.events_per_second,
            "test_ap": self.test_ap,
            "sync_bytes_per_epoch": self.sync_bytes_per_epoch,
            "critical_path_seconds_per_batch": self.critical_path_seconds_per_batch,
            "critical_path": self.critical_path,
            "events_per_worker": self.events_per_worker,
            "epochs_run": self.epochs_run,
        })
    }
}

/// Runs `megagraph temporal compare`.
pub fn compare(args: &TemporalCompareArgs) -> Result<()> {
    if let Some(flag) = args.options.planned_flag() {
        return Err(CliError::flag(flag, "`auto` applies to `temporal train --scheme depbloom`; give a count here"));
    }
    let base = args.options.config();
    let data = load_announced(&args.options.data, &base)?;
    let mut rows = Vec::new();
    for &scheme in &args.schemes {
        for &workers in &args.workers {
            let config = TemporalTrainConfig {
                workers,
                scheme: Some(scheme),
                ..base.clone()
            };
            let report = TemporalTrainer::new(&config, &data).fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)?;
            let row = CompareRow::new(&report, scheme);
            eprintln!(
                "{} x {workers}: {:.0} events/s, test AP {:.4}",
                scheme.name(),
                row.events_per_second,
                row.test_ap
            );
            rows.push(row);
        }
    }
    print!("{}", markdown(&rows));
    if let Some(path) = &args.json {
        megagraph_train::files::write_json_atomically(path, &rows.iter().map(CompareRow::json).collect::<Vec<_>>())?;
    }
    Ok(())
}

/// The rows as a Markdown table.
fn markdown(rows: &[CompareRow]) -> String {
    let mut table = String::from(
        "| scheme | workers | events/s | test AP | memory synced per epoch (MB) | critical path per batch (ms) | events per worker |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        table.push_str(&format!(
            "| {} | {} | {:.0} | {:.4} | {:.2} | {:.1} | {:?} |\n",
            row.scheme.name(),
            row.workers,
            row.events_per_second,
            row.test_ap,
            row.sync_bytes_per_epoch / 1e6,
            row.critical_path_seconds_per_batch * 1e3,
            row.events_per_worker
        ));
    }
    table
}

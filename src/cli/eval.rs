//! `megagraph eval`: trains several seeds of one configuration and reports test accuracy as
//! mean ± std (a table, and JSON with `--json`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use indicatif::ProgressBar;
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_train::{
    EpochMetrics, SeedObserver, SeedRun, SeedsReport, TrainConfig, TrainObserver, evaluate_seeds,
};

use super::backend::{BackendChoice, BackendJob};
use super::error::{CliError, Result};
use super::progress_bar;
use super::train::TrainArgs;

/// Options of `megagraph eval`: the number of seeds, the JSON output, and every `train` flag.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Number of seeds: `--seed` (or the config's seed) and the N-1 after it.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub seeds: usize,
    /// Write the summary (means, standard deviations, one entry per seed) as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub json: Option<PathBuf>,
    /// The run to repeat: `train`'s flags (per-run outputs such as --metrics-out, --plot and
    /// checkpoints are not written per seed).
    #[command(flatten)]
    pub train: TrainArgs,
}

impl EvalArgs {
    /// The configuration and the seeds to train.
    ///
    /// # Errors
    ///
    /// [`CliError::InvalidFlag`] for `--seeds 0` or multi-node flags; the configuration's
    /// errors.
    pub fn to_config(&self) -> Result<(TrainConfig, Vec<u64>)> {
        if self.seeds == 0 {
            return Err(CliError::flag("seeds", "must be at least 1"));
        }
        if self.train.nodes.nodes.is_some_and(|nodes| nodes > 1) {
            return Err(CliError::flag(
                "nodes",
                "eval runs on one node; train each seed with `megagraph train`",
            ));
        }
        let config = self.train.to_config()?;
        let first = config.training.seed;
        let seeds = (0..self.seeds as u64)
            .map(|k| first.wrapping_add(k))
            .collect();
        Ok((config, seeds))
    }
}

/// `megagraph eval`: trains each seed, prints a table of the runs and the mean ± std, and
/// writes the JSON summary.
pub fn eval(args: &EvalArgs) -> Result<()> {
    let (config, seeds) = args.to_config()?;
    args.train.backend.check()?;
    let report = args.train.backend.run_on(
        args.train.devices,
        EvalJob {
            config: &config,
            seeds: &seeds,
        },
    )?;
    print!("{}", table(&report));
    if let Some(path) = &args.json {
        report.write_json(path)?;
        println!("summary written to {}", path.display());
    }
    Ok(())
}

/// The runs and their summary as a plain-text table.
pub fn table(report: &SeedsReport) -> String {
    let mut out = format!("dataset {}\n", report.dataset);
    out.push_str(&format!(
        "{:>6}  {:>8}  {:>10}  {:>10}  {:>9}\n",
        "seed", "test", "best valid", "best epoch", "s/epoch"
    ));
    for run in &report.runs {
        out.push_str(&format!(
            "{:>6}  {:>8.4}  {:>10.4}  {:>10}  {:>9.2}\n",
            run.seed,
            run.test_accuracy,
            run.best_valid_accuracy,
            run.best_epoch,
            run.seconds_per_epoch
        ));
    }
    out.push_str(&format!(
        "test accuracy {:.4} ± {:.4}, valid accuracy {:.4} ± {:.4}, {:.2} s/epoch ({} seeds)\n",
        report.test_accuracy_mean,
        report.test_accuracy_std,
        report.valid_accuracy_mean,
        report.valid_accuracy_std,
        report.seconds_per_epoch_mean,
        report.runs.len()
    ));
    out
}

/// [`evaluate_seeds`] with the progress display, on the chosen backend.
struct EvalJob<'a> {
    config: &'a TrainConfig,
    seeds: &'a [u64],
}

impl BackendJob for EvalJob<'_> {
    type Output = SeedsReport;

    fn run<B: ContextParallelBackend>(
        self,
        _backend: BackendChoice,
        devices: Vec<B::Device>,
        _meter: Arc<dyn MemoryMeter>,
    ) -> Result<SeedsReport> {
        let mut progress = SeedProgress::default();
        Ok(evaluate_seeds::<B>(
            self.config,
            self.seeds,
            &devices,
            &megagraph_train::Quiet,
            &mut progress,
        )?)
    }
}

/// Progress of the seeds: on a terminal a bar of each seed's epochs, otherwise one line per
/// seed (stderr).
#[derive(Default)]
struct SeedProgress {
    bar: Option<ProgressBar>,
    seed: u64,
    label: String,
}

impl TrainObserver for SeedProgress {
    fn epoch_finished(&mut self, metrics: &EpochMetrics, _improved: bool) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("valid {:.4}", metrics.valid_accuracy));
            bar.inc(1);
        }
    }
}

impl SeedObserver for SeedProgress {
    fn seed_started(&mut self, seed: u64, index: usize, total: usize) {
        self.seed = seed;
        self.label = format!("seed {seed} ({}/{total})", index + 1);
        if std::io::stderr().is_terminal() {
            let bar = progress_bar(0, "{prefix} epoch {pos} {msg} ({elapsed})");
            bar.set_prefix(self.label.clone());
            self.bar = Some(bar);
        }
    }

    fn seed_finished(&mut self, run: &SeedRun) {
        let line = format!(
            "{}: test {:.4}, best valid {:.4} at epoch {} of {}, {:.2} s/epoch",
            self.label,
            run.test_accuracy,
            run.best_valid_accuracy,
            run.best_epoch,
            run.epochs_run,
            run.seconds_per_epoch
        );
        match self.bar.take() {
            Some(bar) => bar.finish_with_message(line),
            None => eprintln!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn eval_args(args: &[&str]) -> std::result::Result<EvalArgs, clap::Error> {
        let cli = Cli::try_parse_from(
            ["megagraph", "eval"]
                .into_iter()
                .chain(args.iter().copied()),
        )?;
        match cli.command {
            Command::Eval(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_seeds_start_at_the_seed_flag_and_train_flags_apply() {
        let args = eval_args(&[
            "--seeds", "3", "--seed", "10", "--epochs", "2", "--lr", "0.01",
        ])
        .unwrap();
        let (config, seeds) = args.to_config().unwrap();
        assert_eq!(seeds, [10, 11, 12]);
        assert_eq!(config.training.epochs, 2);
        assert_eq!(config.optimizer.lr, Some(0.01));
        let error = eval_args(&["--seeds", "0"])
            .unwrap()
            .to_config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("--seeds"), "{error}");
    }

    #[test]
    fn the_table_lists_each_seed_and_the_mean() {
        let run = |seed, test| SeedRun {
            seed,
            test_accuracy: test,
            best_valid_accuracy: 0.5,
            best_epoch: 3,
            epochs_run: 4,
            seconds_per_epoch: 1.5,
        };
        let table = table(&SeedsReport::from_runs(
            "toy",
            vec![run(0, 0.6), run(1, 0.8)],
        ));
        assert!(table.contains("dataset toy"), "{table}");
        assert!(
            table.contains("0.6000") && table.contains("0.8000"),
            "{table}"
        );
        assert!(table.contains("test accuracy 0.7000 ± 0.1414"), "{table}");
    }
}

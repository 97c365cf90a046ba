//! `megagraph tune`: a hyperparameter search over a TOML search space, resumable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_train::tune::{
    SearchSpace, TrialParams, TrialResult, TuneObserver, TuneOutputs, TuneReport, run_search,
};
use megagraph_train::{SeedObserver, TrainConfig, TrainObserver};

use super::backend::{BackendChoice, BackendJob};
use super::error::{CliError, Result};
use super::train::TrainArgs;

/// Options of `megagraph tune`: the space, the output directory, the budget, and `train`'s
/// flags for the base config.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The search space (TOML; see configs/tune/ for an example).
    #[arg(long, value_name = "FILE.toml")]
    pub space: PathBuf,
    /// Output directory: trials.json (the journal a rerun resumes from), best.toml,
    /// summary.json and trials.svg.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Trial budget (overrides the space's `search.trials`).
    #[arg(long, value_name = "N")]
    pub trials: Option<usize>,
    /// Training seeds per trial (overrides the space's `search.seeds`).
    #[arg(long, value_name = "N")]
    pub trial_seeds: Option<usize>,
    /// The base run: `train`'s flags (--config, or else the space's `search.base`, then the
    /// flags; the trials' parameters override both).
    #[command(flatten)]
    pub train: TrainArgs,
}

impl TuneArgs {
    /// The search space with the flags' overrides, and the base config.
    ///
    /// # Errors
    ///
    /// The space's or the config's errors; [`CliError::InvalidFlag`] for a zero budget or
    /// seed count, or multi-node flags.
    pub fn resolve_search(&mut self) -> Result<(SearchSpace, TrainConfig)> {
        let mut space = SearchSpace::from_toml_file(&self.space)?;
        if let Some(trials) = self.trials {
            if trials == 0 {
                return Err(CliError::flag("trials", "must be at least 1"));
            }
            space.trials = Some(trials);
        }
        if let Some(seeds) = self.trial_seeds {
            if seeds == 0 {
                return Err(CliError::flag("trial-seeds", "must be at least 1"));
            }
            space.seeds = seeds;
        }
        if self.train.nodes.nodes.is_some_and(|nodes| nodes > 1) {
            return Err(CliError::flag("nodes", "tune runs on one node"));
        }
        if self.train.config.is_none() {
            self.train.config.clone_from(&space.base);
        }
        Ok((space, self.train.to_config()?))
    }
}

/// `megagraph tune`: runs (or resumes) the search and prints the best trial and the files.
pub fn tune(mut args: TuneArgs) -> Result<()> {
    let (space, base) = args.resolve_search()?;
    args.train.backend.check()?;
    let outputs = TuneOutputs::new(&args.out);
    let report = args.train.backend.run_on(
        args.train.devices,
        TuneJob {
            space: &space,
            base: &base,
            outputs: &outputs,
        },
    )?;
    let best = &report.best;
    println!(
        "best: trial #{} of {}, valid accuracy {:.4}, test accuracy {:.4} ({} trials resumed from the journal)",
        best.index,
        report.trials.len(),
        best.valid_accuracy,
        best.test_accuracy,
        report.resumed_trials
    );
    println!("  {}", params_text(&best.params));
    println!("best config written to {}", outputs.best_config().display());
    println!(
        "summary written to {} and {}",
        outputs.summary().display(),
        outputs.chart().display()
    );
    Ok(())
}

/// `key = value` pairs of a trial on one line.
fn params_text(params: &TrialParams) -> String {
    params
        .iter()
        .map(|(key, value)| format!("{key} = {value}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`run_search`] with the progress lines, on the chosen backend.
struct TuneJob<'a> {
    space: &'a SearchSpace,
    base: &'a TrainConfig,
    outputs: &'a TuneOutputs,
}

impl BackendJob for TuneJob<'_> {
    type Output = TuneReport;

    fn run<B: ContextParallelBackend>(
        self,
        _backend: BackendChoice,
        devices: Vec<B::Device>,
        _meter: Arc<dyn MemoryMeter>,
    ) -> Result<TuneReport> {
        let mut progress = TrialProgress {
            started: Instant::now(),
        };
        run_search::<B>(
            self.space,
            self.base,
            self.outputs,
            &devices,
            &megagraph_train::Quiet,
            &mut progress,
        )
        .map_err(CliError::from)
    }
}

/// One line per trial on stderr: its parameters when it starts, its score and the best so far
/// when it ends.
struct TrialProgress {
    started: Instant,
}

impl TrainObserver for TrialProgress {}

impl SeedObserver for TrialProgress {}

impl TuneObserver for TrialProgress {
    fn trial_started(&mut self, index: usize, total: usize, params: &TrialParams) {
        eprintln!(
            "trial #{index} ({}/{total}): {}",
            index + 1,
            params_text(params)
        );
    }

    fn trial_finished(
        &mut self,
        result: &TrialResult,
        total: usize,
        best: &TrialResult,
        resumed: bool,
    ) {
        eprintln!(
            "trial #{} ({}/{total}) {}: valid {:.4}, test {:.4}; best so far #{} ({:.4}) [{:.0} s]",
            result.index,
            result.index + 1,
            if resumed { "from the journal" } else { "done" },
            result.valid_accuracy,
            result.test_accuracy,
            best.index,
            best.valid_accuracy,
            self.started.elapsed().as_secs_f64()
        );
    }
}

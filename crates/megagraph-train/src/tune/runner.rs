//! [`run_search`]: the trials of a [`SearchSpace`] in order, each trained by
//! [`evaluate_seeds`], journaled after each one, and the best written as a config file.

use std::path::{Path, PathBuf};
use std::time::Instant;

use megagraph_parallel::ContextParallelBackend;
use serde::{Deserialize, Serialize};

use super::apply::trial_config;
use super::error::{TuneError, TuneResult};
use super::journal::{Journal, TrialResult, fingerprint, journal_path};
use super::space::{SearchSpace, Strategy, TrialParams};
use crate::config::TrainConfig;
use crate::eval::{SeedObserver, evaluate_seeds};
use crate::plot::{Chart, Series, SeriesStyle};
use crate::progress::PrepareProgress;

/// Receives the progress of a search: each trial's start and end and, as a
/// [`SeedObserver`], its seeds and epochs.
pub trait TuneObserver: SeedObserver {
    /// Trial `index` (of `total`) starts with `params`.
    fn trial_started(&mut self, _index: usize, _total: usize, _params: &TrialParams) {}
    /// Trial `result.index` (of `total`) is done; `resumed` when it was read from the journal
    /// instead of run. `best` is the best trial so far.
    fn trial_finished(
        &mut self,
        _result: &TrialResult,
        _total: usize,
        _best: &TrialResult,
        _resumed: bool,
    ) {
    }
}

impl TuneObserver for crate::observer::Quiet {}

/// What a search found, as `summary.json` holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    /// How the trials were chosen.
    pub strategy: Strategy,
    /// The best trial (highest mean validation accuracy; the earlier one on a tie).
    pub best: TrialResult,
    /// Every trial, by index.
    pub trials: Vec<TrialResult>,
    /// Trials read from the journal of an earlier, interrupted run rather than run now.
    pub resumed_trials: usize,
    /// The best configuration, a file `megagraph train --config` reads.
    pub best_config: PathBuf,
}

/// Where a search writes: `trials.json` (the journal), `best.toml`, `summary.json` and
/// `trials.svg` in one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneOutputs {
    /// The output directory.
    pub dir: PathBuf,
}

impl TuneOutputs {
    /// The outputs in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The trials journal.
    pub fn journal(&self) -> PathBuf {
        journal_path(&self.dir)
    }

    /// The best configuration (TOML).
    pub fn best_config(&self) -> PathBuf {
        self.dir.join("best.toml")
    }

    /// The summary of every trial (JSON).
    pub fn summary(&self) -> PathBuf {
        self.dir.join("summary.json")
    }

    /// The chart of every trial's score (SVG).
    pub fn chart(&self) -> PathBuf {
        self.dir.join("trials.svg")
    }
}

/// Runs the search `space` over `base` (each trial: `base` with its parameters, trained with
/// `space.seeds` seeds from `base.training.seed` on `devices`), writing into `outputs`.
///
/// The journal is rewritten atomically after every trial; a run that finds a journal of the
/// same search (same space, budget and base config) skips the trials it holds, so a search
/// killed at any point and started again with the same arguments ends with the result of an
/// uninterrupted one (training is deterministic for a seed).
///
/// # Errors
///
/// A trial whose parameters do not fit the config (checked for every trial before the first
/// runs), a journal of another search, a trial's training error, or an output that cannot be
/// written.
pub fn run_search<B: ContextParallelBackend>(
    space: &SearchSpace,
    base: &TrainConfig,
    outputs: &TuneOutputs,
    devices: &[B::Device],
    prepare: &dyn PrepareProgress,
    observer: &mut dyn TuneObserver,
) -> TuneResult<TuneReport> {
    let planned = space.trials();
    let configs = planned
        .iter()
        .map(|params| trial_config(base, params))
        .collect::<TuneResult<Vec<_>>>()?;
    let journal_file = outputs.journal();
    let mut journal = Journal::load(
        &journal_file,
        &fingerprint(&format!("{:?}", (space, &planned, base))),
    )?;
    if let Some(stray) = journal
        .trials
        .iter()
        .find(|trial| planned.get(trial.index) != Some(&trial.params))
    {
        return Err(TuneError::Journal {
            path: journal_file,
            message: format!("trial {} is not one this search plans", stray.index),
        });
    }
    let total = planned.len();
    let mut resumed_trials = 0;
    let mut best: Option<TrialResult> = None;
    for (index, (params, config)) in planned.iter().zip(&configs).enumerate() {
        let (result, resumed) = match journal.get(index) {
            Some(done) => (done.clone(), true),
            None => {
                observer.trial_started(index, total, params);
                let started = Instant::now();
                let seeds: Vec<u64> = (0..space.seeds as u64)
                    .map(|k| config.training.seed.wrapping_add(k))
                    .collect();
                let report = evaluate_seeds::<B>(config, &seeds, devices, prepare, &mut *observer)?;
                log::info!(
                    "trial {index}: valid {:.4} in {:.1} s",
                    report.valid_accuracy_mean,
                    started.elapsed().as_secs_f64()
                );
                let result = TrialResult {
                    index,
                    params: params.clone(),
                    valid_accuracy: report.valid_accuracy_mean,
                    test_accuracy: report.test_accuracy_mean,
                    seconds_per_epoch: report.seconds_per_epoch_mean,
                    pid: std::process::id(),
                    runs: report.runs,
                };
                journal.trials.push(result.clone());
                journal.save(&journal_file)?;
                (result, false)
            }
        };
        resumed_trials += usize::from(resumed);
        if best
            .as_ref()
            .is_none_or(|b| result.valid_accuracy > b.valid_accuracy)
        {
            best = Some(result.clone());
        }
        if let Some(best) = &best {
            observer.trial_finished(&result, total, best, resumed);
        }
    }
    let Some(best) = best else {
        return Err(TuneError::Space {
            path: PathBuf::new(),
            key: "search.trials".into(),
            reason: "plans no trial".into(),
        });
    };
    let mut trials = journal.trials;
    trials.sort_by_key(|trial| trial.index);
    let report = TuneReport {
        strategy: space.strategy,
        best: best.clone(),
        trials,
        resumed_trials,
        best_config: outputs.best_config(),
    };
    write_best_config(&configs[best.index], &best, total, &outputs.best_config())?;
    write_summary(&report, &outputs.summary())?;
    trials_chart(&report).write(&outputs.chart())?;
    Ok(report)
}

/// Writes the best trial's configuration as TOML, headed by a comment naming its parameters.
fn write_best_config(
    config: &TrainConfig,
    best: &TrialResult,
    total: usize,
    path: &Path,
) -> TuneResult<()> {
    let body = toml::to_string_pretty(config).map_err(|err| TuneError::Param {
        key: String::new(),
        value: String::new(),
        reason: format!("the best config does not serialize: {err}"),
    })?;
    let mut text = format!(
        "# megagraph tune: the best of {total} trials (trial #{}, mean best validation accuracy {:.4})\n",
        best.index, best.valid_accuracy
    );
    for (key, value) in &best.params {
        text.push_str(&format!("#   {key} = {value}\n"));
    }
    text.push('\n');
    text.push_str(&body);
    Ok(crate::files::write_atomically(path, text.as_bytes())?)
}

/// Writes the report as pretty JSON, atomically.
fn write_summary(report: &TuneReport, path: &Path) -> TuneResult<()> {
    Ok(crate::files::write_json_atomically(path, report)?)
}

/// Every trial's validation and test accuracy against its index, with the best so far.
pub fn trials_chart(report: &TuneReport) -> Chart {
    let points = |value: fn(&TrialResult) -> f64| -> Vec<(f64, f64)> {
        report
            .trials
            .iter()
            .map(|t| (t.index as f64, value(t)))
            .collect()
    };
    let mut running = f64::NEG_INFINITY;
    let best_so_far = report
        .trials
        .iter()
        .map(|t| {
            running = running.max(t.valid_accuracy);
            (t.index as f64, running)
        })
        .collect();
    Chart::new(
        format!("tune: {} trials", report.trials.len()),
        "trial",
        "accuracy",
    )
    .with_series(Series::new(
        "valid (score)",
        points(|t| t.valid_accuracy),
        SeriesStyle::Points,
    ))
    .with_series(Series::new(
        "test",
        points(|t| t.test_accuracy),
        SeriesStyle::Points,
    ))
    .with_series(Series::new(
        "best valid so far",
        best_so_far,
        SeriesStyle::Line,
    ))
}

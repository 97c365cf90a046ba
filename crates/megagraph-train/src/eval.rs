//! Several seeds of one configuration: [`evaluate_seeds`] trains each seed the way
//! `megagraph train --seed S` does ([`prepare_with_progress`], then
//! [`NodeClassificationTrainer::fit_on`]) and summarizes the test accuracy as mean ± std
//! ([`SeedsReport`]).

use std::path::Path;

use megagraph_parallel::ContextParallelBackend;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::error::{Result, TrainError};
use crate::metrics::TrainReport;
use crate::prepare::prepare_with_progress;
use crate::progress::PrepareProgress;
use crate::observer::TrainObserver;
use crate::trainer::NodeClassificationTrainer;

/// The result of one seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedRun {
    /// The seed (`training.seed`: sequences, initialization, dropout, order).
    pub seed: u64,
    /// Test accuracy of the best-validation model.
    pub test_accuracy: f64,
    /// Best validation accuracy.
    pub best_valid_accuracy: f64,
    /// Epoch of the best validation accuracy.
    pub best_epoch: usize,
    /// Epochs run.
    pub epochs_run: usize,
    /// Seconds per epoch (training and evaluation).
    pub seconds_per_epoch: f64,
}

impl SeedRun {
    /// The figures of `report`, a run with `seed`.
    pub fn from_report(seed: u64, report: &TrainReport) -> Self {
        Self {
            seed,
            test_accuracy: report.test_accuracy,
            best_valid_accuracy: report.best_valid_accuracy,
            best_epoch: report.best_epoch,
            epochs_run: report.epochs_run,
            seconds_per_epoch: report.seconds_per_epoch,
        }
    }
}

/// Mean ± standard deviation over the seeds of one configuration, as `megagraph eval --json`
/// writes it. Standard deviations are the sample ones (divisor `n - 1`; 0 for one seed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedsReport {
    /// Dataset name.
    pub dataset: String,
    /// Mean test accuracy.
    pub test_accuracy_mean: f64,
    /// Standard deviation of the test accuracy.
    pub test_accuracy_std: f64,
    /// Mean best validation accuracy.
    pub valid_accuracy_mean: f64,
    /// Standard deviation of the best validation accuracy.
    pub valid_accuracy_std: f64,
    /// Mean seconds per epoch.
    pub seconds_per_epoch_mean: f64,
    /// One entry per seed, in the order run.
    pub runs: Vec<SeedRun>,
}

/// Mean and sample standard deviation of `values` (`(0, 0)` when empty, std 0 for one value).
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() == 1 {
        return (mean, 0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance.sqrt())
}

impl SeedsReport {
    /// The summary of `runs` on `dataset`.
    pub fn from_runs(dataset: impl Into<String>, runs: Vec<SeedRun>) -> Self {
        let column = |f: fn(&SeedRun) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        let (test_accuracy_mean, test_accuracy_std) = mean_std(&column(|r| r.test_accuracy));
        let (valid_accuracy_mean, valid_accuracy_std) =
            mean_std(&column(|r| r.best_valid_accuracy));
        let (seconds_per_epoch_mean, _) = mean_std(&column(|r| r.seconds_per_epoch));
        Self {
            dataset: dataset.into(),
            test_accuracy_mean,
            test_accuracy_std,
            valid_accuracy_mean,
            valid_accuracy_std,
            seconds_per_epoch_mean,
            runs,
        }
    }

    /// Writes the report as pretty JSON, atomically.
    ///
    /// # Errors
    ///
    /// [`TrainError::Output`] naming `path`.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        crate::files::write_json_atomically(path, self)
    }
}

/// Receives the progress of [`evaluate_seeds`]: each seed's start and end, and, as a
/// [`TrainObserver`], its epochs.
pub trait SeedObserver: TrainObserver {
    /// Seed `seed`, the `index`-th (from 0) of `total`, starts.
    fn seed_started(&mut self, _seed: u64, _index: usize, _total: usize) {}
    /// A seed finished.
    fn seed_finished(&mut self, _run: &SeedRun) {}
}

impl SeedObserver for crate::observer::Quiet {}

/// `config` with `training.seed = seed` and no per-run outputs (metrics file, plots,
/// checkpoints, resume), which the seeds would otherwise overwrite in turn.
pub fn seed_config(config: &TrainConfig, seed: u64) -> TrainConfig {
    let mut config = config.clone();
    config.training.seed = seed;
    config.training.metrics_out = None;
    config.training.plot_dir = None;
    config.training.checkpoint_dir = None;
    config.training.resume = false;
    config
}

/// Trains `config` once per seed of `seeds`, each exactly as `megagraph train --seed S` would
/// (data prepared with that seed, then [`NodeClassificationTrainer::fit_on`] on `devices`),
/// without its per-run outputs ([`seed_config`]), and summarizes them.
///
/// # Errors
///
/// [`TrainError::InvalidConfig`] for no seeds; otherwise the first error of a seed's
/// preparation or training.
pub fn evaluate_seeds<B: ContextParallelBackend>(
    config: &TrainConfig,
    seeds: &[u64],
    devices: &[B::Device],
    prepare: &dyn PrepareProgress,
    observer: &mut dyn SeedObserver,
) -> Result<SeedsReport> {
    if seeds.is_empty() {
        return Err(TrainError::InvalidConfig {
            field: "seeds",
            reason: "no seeds to evaluate: give at least one".into(),
        });
    }
    let mut dataset = String::new();
    let mut runs = Vec::with_capacity(seeds.len());
    for (index, &seed) in seeds.iter().enumerate() {
        observer.seed_started(seed, index, seeds.len());
        let config = seed_config(config, seed);
        let data = prepare_with_progress(&config, prepare)?;
        dataset.clone_from(&data.dataset.name);
        let trainer = NodeClassificationTrainer::new(&config, data);
        let report = trainer.fit_on::<B>(devices, &mut *observer)?.report;
        let run = SeedRun::from_report(seed, &report);
        log::info!(
            "seed {seed}: test accuracy {:.4}, best valid {:.4} at epoch {}",
            run.test_accuracy,
            run.best_valid_accuracy,
            run.best_epoch
        );
        observer.seed_finished(&run);
        runs.push(run);
    }
    Ok(SeedsReport::from_runs(dataset, runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64, test: f64, valid: f64, seconds: f64) -> SeedRun {
        SeedRun {
            seed,
            test_accuracy: test,
            best_valid_accuracy: valid,
            best_epoch: 1,
            epochs_run: 2,
            seconds_per_epoch: seconds,
        }
    }

    #[test]
    fn the_summary_is_the_mean_and_sample_std_of_the_runs() {
        let report = SeedsReport::from_runs(
            "d",
            vec![
                run(0, 0.8, 0.7, 1.0),
                run(1, 0.9, 0.75, 3.0),
                run(2, 0.85, 0.8, 2.0),
            ],
        );
        assert!((report.test_accuracy_mean - 0.85).abs() < 1e-12);
        // sample std of 0.8, 0.9, 0.85: sqrt((0.0025 + 0.0025 + 0) / 2) = 0.05
        assert!((report.test_accuracy_std - 0.05).abs() < 1e-12);
        assert!((report.valid_accuracy_mean - 0.75).abs() < 1e-12);
        assert!((report.seconds_per_epoch_mean - 2.0).abs() < 1e-12);
        assert_eq!(
            report.runs.iter().map(|r| r.seed).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(mean_std(&[0.5]), (0.5, 0.0));
        assert_eq!(mean_std(&[]), (0.0, 0.0));
    }

    #[test]
    fn a_seed_config_drops_the_outputs_each_run_would_overwrite() {
        let mut config = TrainConfig::default();
        config.training.metrics_out = Some("m.json".into());
        config.training.checkpoint_dir = Some("ckpt".into());
        config.training.resume = true;
        config.training.plot_dir = Some("plots".into());
        let seeded = seed_config(&config, 7);
        assert_eq!(seeded.training.seed, 7);
        assert_eq!(
            (
                seeded.training.metrics_out,
                seeded.training.checkpoint_dir,
                seeded.training.plot_dir
            ),
            (None, None, None)
        );
        assert!(!seeded.training.resume);
        assert_eq!(seeded.model, config.model);
    }
}

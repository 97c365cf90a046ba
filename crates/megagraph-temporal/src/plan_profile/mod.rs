//! [`measure_temporal_profile`]: the measuring side of the DepBloom planner hook
//! (`megagraph_planner::temporal`), on the real backend and the real dataset.
//!
//! - **Step times.** For each refinement count c, a few training steps of full batches of the
//!   run's batch size with IMR(c), warm-up excluded (the median is kept); the same for a plain
//!   batch of the reference size (TGL's 600). Single-worker steps: the planner divides the
//!   work over the workers.
//! - **Synchronization.** The seconds per node of a window-boundary exchange: node rows read
//!   out of one state and written into another, as the workers' memory store does.
//! - **Stream statistics** (no training): per refinement count and for the reference batch,
//!   the intra-chunk dependency ratio over the training events; per candidate window, the
//!   topology-aware shards' cross-shard event ratio, imbalance and nodes per window.

mod stream;
mod timing;

use burn::tensor::backend::AutodiffBackend;
use megagraph_planner::temporal::{RefineSample, TemporalProfile, TemporalSetting};

use crate::config::TemporalTrainConfig;
use crate::dataset::TemporalDataset;
use crate::error::{Result, TemporalTrainError};
use stream::{dependency_ratio, window_sample};
use timing::{Repetitions, seconds_per_batch, sync_seconds_per_node};

/// What [`measure_temporal_profile`] measures, and how long.
#[derive(Debug, Clone, PartialEq)]
pub struct TemporalProfileOptions {
    /// Workers the run will have (the windows are sharded over them).
    pub workers: usize,
    /// Refinement counts to time; 1 is always added, counts above the batch size are dropped.
    /// Default: 1, 2, 4, 8.
    pub refine: Vec<usize>,
    /// Candidate windows in events; empty: 1, 2, 4, 8 and 16 × workers × batch size, those
    /// within the training events (at least the first).
    pub windows: Vec<usize>,
    /// Untimed training steps before the timed ones, per measurement. Default: 1.
    pub warmup_batches: usize,
    /// Timed training steps per measurement (the median is kept). Default: 3.
    pub timed_batches: usize,
    /// The small batch refinement aims at. Default: 600 (TGL).
    pub reference_batch: usize,
    /// Nodes per timed exchange of the synchronization cost. Default: 1,000.
    pub sync_nodes: usize,
}

impl Default for TemporalProfileOptions {
    fn default() -> Self {
        Self {
            workers: 1,
            refine: vec![1, 2, 4, 8],
            windows: Vec::new(),
            warmup_batches: 1,
            timed_batches: 3,
            reference_batch: 600,
            sync_nodes: 1000,
        }
    }
}

/// Window multiples of `workers × batch size` tried when none are given.
const WINDOW_MULTIPLES: [usize; 5] = [1, 2, 4, 8, 16];

/// Measures the [`TemporalProfile`] of training `config`'s model with `config.batch_size`
/// events per worker on `data`, on backend `B` at `device` (named `backend` in the profile).
/// `config`'s refinement count, window and scheme are ignored: they are what is planned.
///
/// # Errors
///
/// [`TemporalTrainError::InvalidConfig`] for no workers, a batch larger than the training
/// events, or a window of 0; and whatever a training step can fail with.
pub fn measure_temporal_profile<B: AutodiffBackend>(
    config: &TemporalTrainConfig,
    data: &TemporalDataset,
    options: &TemporalProfileOptions,
    backend: &str,
    device: &B::Device,
) -> Result<TemporalProfile> {
    let invalid = |field, reason: String| TemporalTrainError::InvalidConfig { field, reason };
    let (train, batch, workers) = (data.split.train.clone(), config.batch_size, options.workers);
    if workers == 0 {
        return Err(invalid("workers", "must be at least 1".into()));
    }
    if batch == 0 || batch > train.len() {
        return Err(invalid(
            "batch-size",
            format!("must be between 1 and the {} training events", train.len()),
        ));
    }
    let plain = TemporalTrainConfig {
        refine: 1,
        workers: 1,
        scheme: None,
        window: None,
        critical_path: None,
        checkpoint_dir: None,
        ..config.clone()
    };
    let repetitions = Repetitions {
        warmup: options.warmup_batches,
        timed: options.timed_batches,
    };
    let mut counts: Vec<usize> = options
        .refine
        .iter()
        .copied()
        .filter(|&c| (1..=batch).contains(&c))
        .collect();
    counts.push(1);
    counts.sort_unstable();
    counts.dedup();
    // every refinement count, then the plain reference batch when it differs, timed in turns
    let reference_batch = options.reference_batch.clamp(1, train.len());
    let mut configs: Vec<TemporalTrainConfig> = counts
        .iter()
        .map(|&refine| TemporalTrainConfig {
            refine,
            ..plain.clone()
        })
        .collect();
    if reference_batch != batch {
        configs.push(TemporalTrainConfig {
            batch_size: reference_batch,
            ..plain.clone()
        });
    }
    let seconds = seconds_per_batch::<B>(&configs, data, repetitions, device)?;
    let refine: Vec<RefineSample> = counts
        .iter()
        .zip(&seconds)
        .map(|(&c, &seconds)| {
            log::info!("temporal profile: batch {batch}, refine {c}: {seconds:.4} s per step");
            RefineSample {
                refine: c,
                seconds_per_batch: seconds,
                dependency_ratio: dependency_ratio(&data.stream, train.clone(), batch, c),
            }
        })
        .collect();
    // the plain batch is the reference when their sizes agree
    let reference_seconds = seconds
        .get(if reference_batch == batch { 0 } else { counts.len() })
        .copied()
        .unwrap_or(0.0);
    let sync = sync_seconds_per_node::<B>(&plain, data, options.sync_nodes, repetitions, device)?;
    let windows = if options.windows.is_empty() {
        let all: Vec<usize> = WINDOW_MULTIPLES.iter().map(|m| m * workers * batch).collect();
        let within: Vec<usize> = all.iter().copied().filter(|&w| w <= train.len()).collect();
        if within.is_empty() { vec![all[0]] } else { within }
    } else {
        let mut windows = options.windows.clone();
        windows.sort_unstable();
        windows.dedup();
        windows
    };
    let windows = windows
        .into_iter()
        .map(|w| window_sample(&data.stream, workers, w, config.seed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TemporalProfile {
        setting: TemporalSetting {
            dataset: data.name.clone(),
            model: config.model.name().to_string(),
            backend: backend.to_string(),
            workers,
            batch_size: batch,
            train_events: train.len(),
        },
        reference_batch,
        reference_dependency_ratio: dependency_ratio(&data.stream, train.clone(), reference_batch, 1),
        reference_seconds_per_batch: reference_seconds,
        refine,
        sync_seconds_per_node: sync,
        windows,
    })
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use megagraph_graph::temporal::{InteractionConfig, SplitFractions};

    use super::*;
    use crate::dataset::TemporalSource;

    fn data() -> TemporalDataset {
        let source = TemporalSource::Synthetic(InteractionConfig {
            num_events: 1000,
            ..InteractionConfig::small()
        });
        TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
    }

    fn measure(config: &TemporalTrainConfig, options: &TemporalProfileOptions) -> Result<TemporalProfile> {
        let _turn = crate::seeded_turn();
        measure_temporal_profile::<Autodiff<Flex>>(config, &data(), options, "flex", &Default::default())
    }

    #[test]
    fn a_measured_profile_holds_every_count_and_window_and_plans() {
        let config = TemporalTrainConfig {
            batch_size: 48,
            dim: 8,
            ..Default::default()
        };
        let options = TemporalProfileOptions {
            workers: 2,
            refine: vec![4, 2, 80],
            timed_batches: 2,
            reference_batch: 24,
            ..Default::default()
        };
        let profile = measure(&config, &options).unwrap_or_else(|err| panic!("{err}"));
        // 1 is added, 80 (above the batch) dropped; windows of 1..16 x 2 x 48 within 700 events
        let counts: Vec<usize> = profile.refine.iter().map(|s| s.refine).collect();
        assert_eq!(counts, [1, 2, 4]);
        let windows: Vec<usize> = profile.windows.iter().map(|w| w.window).collect();
        assert_eq!(windows, [96, 192, 384]);
        assert_eq!(
            (
                profile.setting.train_events,
                profile.setting.batch_size,
                profile.reference_batch
            ),
            (700, 48, 24)
        );
        assert!(profile.refine.iter().all(|s| s.seconds_per_batch > 0.0));
        assert!(profile.reference_seconds_per_batch > 0.0 && profile.sync_seconds_per_node > 0.0);
        // nested chunks (48, 24, 12 events) and the smaller reference batch: fewer dependent events
        assert!(
            profile
                .refine
                .windows(2)
                .all(|p| p[1].dependency_ratio <= p[0].dependency_ratio)
        );
        assert!(profile.reference_dependency_ratio <= profile.refine[0].dependency_ratio);
        let plan = megagraph_planner::temporal::plan_temporal(&profile).unwrap_or_else(|err| panic!("{err}"));
        assert!(windows.contains(&plan.window) && counts.contains(&plan.refine));
    }

    #[test]
    fn impossible_requests_name_their_field() {
        let config = TemporalTrainConfig::default();
        for (field, config, options) in [
            (
                "workers",
                config.clone(),
                TemporalProfileOptions {
                    workers: 0,
                    ..Default::default()
                },
            ),
            (
                "batch-size",
                TemporalTrainConfig {
                    batch_size: 701,
                    ..config
                },
                Default::default(),
            ),
        ] {
            match measure(&config, &options) {
                Err(TemporalTrainError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}

//! `megagraph temporal plan`: DepBloom's window and refinement count for a worker count and
//! batch size, from a profile measured on the dataset (or a saved one), with the reasons.

use std::path::PathBuf;

use burn::backend::{Autodiff, Flex};
use clap::Args;
use megagraph_models::temporal::TemporalPreset;
use megagraph_planner::temporal::{TemporalProfile, plan_temporal};
use megagraph_temporal::{TemporalDataset, TemporalProfileOptions, TemporalTrainConfig, measure_temporal_profile};

use super::error::Result;
use super::temporal::options::{TemporalDataArgs, load_announced, temporal_preset_parser};

/// `megagraph temporal plan`.
#[derive(Debug, Args)]
pub struct TemporalPlanArgs {
    /// The event stream.
    #[command(flatten)]
    pub data: TemporalDataArgs,
    /// The model.
    #[arg(long, value_name = "NAME", default_value = "tgn", value_parser = temporal_preset_parser())]
    pub model: TemporalPreset,
    /// Workers the run will have.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: usize,
    /// Events per batch of one worker (600).
    #[arg(long, value_name = "B")]
    pub batch_size: Option<usize>,
    /// Width of memory, time encodings, embeddings and learned node inputs (100).
    #[arg(long, value_name = "D")]
    pub dim: Option<usize>,
    /// Seed of parameters, negatives, sampling and the partitioner (0).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Refinement counts to time, comma-separated (1 is always timed).
    #[arg(long, value_name = "C,..", value_delimiter = ',', default_value = "1,2,4,8")]
    pub refine_counts: Vec<usize>,
    /// Candidate windows in events, comma-separated (1, 2, 4, 8, 16 × workers × batch size).
    #[arg(long, value_name = "W,..", value_delimiter = ',')]
    pub windows: Vec<usize>,
    /// Timed training steps per measurement, after one warm-up step.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub batches: usize,
    /// Plan from this saved profile instead of measuring one (data and model flags are then
    /// not read).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dataset", "jodie", "tgl", "synthetic_events"])]
    pub profile: Option<PathBuf>,
    /// Save the measured profile as JSON.
    #[arg(long, value_name = "FILE", conflicts_with = "profile")]
    pub profile_out: Option<PathBuf>,
    /// Write the plan as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs `megagraph temporal plan`.
pub(super) fn plan(args: &TemporalPlanArgs) -> Result<()> {
    let profile = match &args.profile {
        Some(path) => TemporalProfile::load(path)?,
        None => {
            let defaults = TemporalTrainConfig::default();
            let config = TemporalTrainConfig {
                model: args.model,
                batch_size: args.batch_size.unwrap_or(defaults.batch_size),
                dim: args.dim.unwrap_or(defaults.dim),
                seed: args.seed.unwrap_or(defaults.seed),
                ..defaults
            };
            let data = load_announced(&args.data, &config)?;
            let options = TemporalProfileOptions {
                workers: args.workers,
                refine: args.refine_counts.clone(),
                windows: args.windows.clone(),
                timed_batches: args.batches,
                ..TemporalProfileOptions::default()
            };
            let profile = measure(&config, &data, &options)?;
            if let Some(path) = &args.profile_out {
                profile.save(path)?;
            }
            profile
        }
    };
    let plan = plan_temporal(&profile)?;
    print!("{}", plan.explain());
    if let Some(path) = &args.json {
        megagraph_train::files::write_json_atomically(path, &plan)?;
    }
    Ok(())
}

/// The DepBloom planner's profile of `config` on `data`, measured on the command line's
/// backend.
pub(super) fn measure(
    config: &TemporalTrainConfig,
    data: &TemporalDataset,
    options: &TemporalProfileOptions,
) -> Result<TemporalProfile> {
    eprintln!(
        "measuring the planner's profile ({} timed steps per refinement count)",
        options.timed_batches
    );
    Ok(measure_temporal_profile::<Autodiff<Flex>>(
        config,
        data,
        options,
        "flex",
        &Default::default(),
    )?)
}

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use megagraph_calibrate::{
    InTurn, MemoryMeter, PlansToValidate, ValidationOptions, ValidationProgress, ValidationReport,
    validate_plans_in_turn,
};
use megagraph_parallel::ContextParallelBackend;
use megagraph_planner::{
    ClusterSpec, CpMode, ModelShape, Plan, SearchOptions, Workload, cluster_analytic_profile,
    plan as search_plan,
};

use super::backend::{BackendChoice, BackendJob};
use super::profile::{ProfilingArgs, last_level_cache_bytes, measured_profile};
use super::model_spec::ModelSpecArgs;
use super::progress_bar;
use super::error::{CliError, Result};
use megagraph_train::files::write_json_atomically;
use megagraph_train::plot::{Chart, Series, SeriesStyle};
use megagraph_train::{DataConfig, TrainingConfig};

/// Where `megagraph plan` takes part times and activation sizes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileSource {
    /// Estimated from the cluster file's `[compute]` hints (any cluster).
    Analytic,
    /// Measured on this machine (on `--backend`, Flex by default) and cached: for a cluster of
    /// devices like this machine's.
    Measured,
}

/// `megagraph plan --cp-mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanCpMode {
    /// Plan every `cp > 1` layout with the graph-aware ring only.
    Ring,
    /// Plan every `cp > 1` layout with Ulysses only (layouts whose `cp` does not divide the
    /// heads are rejected).
    Ulysses,
    /// Try both for every `cp > 1` (Ulysses where `cp` divides the heads) and keep the faster
    /// that fits.
    Auto,
}

impl PlanCpMode {
    /// The mode the search is restricted to (`None`: both).
    pub fn forced(self) -> Option<CpMode> {
        match self {
            Self::Ring => Some(CpMode::Ring),
            Self::Ulysses => Some(CpMode::Ulysses),
            Self::Auto => None,
        }
    }
}

/// Options of `megagraph plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Cluster description (TOML); see configs/clusters/.
    #[arg(long, value_name = "FILE.toml")]
    pub cluster: PathBuf,
    /// The model.
    #[command(flatten)]
    pub model: ModelSpecArgs,
    /// Nodes per sequence (default: `train --seq-len`'s).
    #[arg(long, value_name = "S", default_value_t = DataConfig::default().seq_len)]
    pub seq_len: usize,
    /// Sequences per optimizer step (default: `train --batch-size`'s).
    #[arg(long, value_name = "N", default_value_t = TrainingConfig::default().batch_size)]
    pub sequences_per_step: usize,
    /// Largest micro-batch count to consider.
    #[arg(long, value_name = "M", default_value_t = 64)]
    pub max_micro_batches: usize,
    /// How context groups attend: plan with the ring only, Ulysses only, or both (auto: the
    /// faster that fits, per plan; `explain` says why). Written to the plan as `cp_mode`.
    #[arg(long, value_enum, value_name = "MODE", default_value = "auto")]
    pub cp_mode: PlanCpMode,
    /// Profile: analytic (from the cluster's compute hints) or measured (on this machine,
    /// cached; for the local CPU cluster).
    #[arg(long, value_enum, value_name = "SOURCE", default_value = "analytic")]
    pub profile: ProfileSource,
    /// How a measured profile is taken.
    #[command(flatten)]
    pub profiling: ProfilingArgs,
    /// Run the top candidates for a few steps on this machine's mesh (worker threads) and print
    /// predicted against measured time and memory. With a measured profile, its points are
    /// measured again before the validation and after each round, and each plan is also
    /// predicted from that profile taken in turn with the plans.
    #[arg(long)]
    pub validate: bool,
    /// Candidates to validate (the fastest first).
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub validate_top: usize,
    /// Measured steps per validated plan at least; the plans take turns over 3 rounds (fewer
    /// when N is smaller), each round one warm-up step and a share of the steps.
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub validate_steps: usize,
    /// Measured seconds per validated plan to aim for: a plan predicted to step faster runs
    /// more steps than --validate-steps (up to 40).
    #[arg(long, value_name = "SECONDS", default_value_t = 4.0)]
    pub validate_seconds: f64,
    /// SVG of predicted against measured step time (with --validate); the peak memory goes to
    /// `FILE-memory.svg` next to it. Default: next to the JSON, `OUT.svg`.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Write `{best, candidates, rejected, search_seconds, ...}` as JSON (with --validate, the
    /// validated plans carry `measured_step_seconds` and `measured_peak_bytes_per_device`, and
    /// `validation` holds the comparison, with `in_turn_predicted_step_seconds` per plan and
    /// `in_turn_profile` when the profile was measured in turn).
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<PathBuf>,
}

/// `megagraph plan`: searches plans with an analytic or measured profile, prints the
/// explanation, optionally validates the top candidates on this machine and writes the JSON
/// report (and the predicted-vs-measured SVG).
pub fn plan(args: &PlanArgs) -> Result<()> {
    let cluster =
        ClusterSpec::from_toml_file(&args.cluster).map_err(megagraph_planner::PlanError::from)?;
    let shape = args.model.shape();
    if !(args.validate_seconds.is_finite() && args.validate_seconds >= 0.0) {
        return Err(CliError::InvalidFlag {
            flag: "validate-seconds",
            reason: format!(
                "{} is not a number of seconds, 0 or more",
                args.validate_seconds
            ),
        });
    }
    let workload = Workload {
        seq_len: args.seq_len,
        sequences_per_step: args.sequences_per_step,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let options = SearchOptions {
        max_micro_batches: args.max_micro_batches,
        cp_mode: args.cp_mode.forced(),
        ..SearchOptions::default()
    };
    let profile = match args.profile {
        ProfileSource::Analytic => {
            cluster_analytic_profile(&cluster, &shape, workload.dtype_bytes)?
        }
        ProfileSource::Measured => {
            let (table, path, _) = measured_profile(&cluster, &shape, &args.profiling)?;
            println!("measured profile: {}", path.display());
            table
        }
    };
    let mut report = search_plan(&cluster, &shape, &workload, &profile, &options)?;
    println!("{}", report.explain());
    if args.profile == ProfileSource::Measured
        && let Some(note) = args.profiling.warm_cache_note(
            report.best.predicted.peak_bytes_per_device,
            last_level_cache_bytes(),
        )
    {
        println!("{note}");
    }
    let validation = if args.validate {
        let top: Vec<Plan> = report
            .candidates
            .iter()
            .take(args.validate_top.max(1))
            .cloned()
            .collect();
        // a measured profile is measured again in turns with the plans
        let profiler = match args.profile {
            ProfileSource::Measured => Some(args.profiling.options(&cluster)?),
            ProfileSource::Analytic => None,
        };
        let in_turn = profiler.as_ref().map(|profiler| InTurn {
            profile: &profile,
            profiler,
            cluster: &cluster,
            search: &options,
        });
        let validation = validate(
            args.profiling.backend,
            &shape,
            &workload,
            &top,
            ValidationOptions {
                steps: args.validate_steps.max(1),
                measured_seconds: args.validate_seconds,
                ..ValidationOptions::default()
            },
            in_turn,
        )?;
        println!("\n{validation}");
        validation.apply_to(&mut report);
        Some(validation)
    } else {
        None
    };
    if let Some(path) = &args.json {
        let mut json = serde_json::to_value(&report).map_err(|err| output_error(path, err))?;
        if let (Some(validation), Some(object)) = (&validation, json.as_object_mut()) {
            object.insert(
                "validation".into(),
                serde_json::to_value(validation).map_err(|err| output_error(path, err))?,
            );
        }
        write_json_atomically(path, &json)?;
        println!("plan written to {}", path.display());
    }
    if let Some(validation) = &validation {
        let plot = args
            .plot
            .clone()
            .or_else(|| args.json.as_ref().map(|json| json.with_extension("svg")));
        match plot {
            Some(plot) => {
                validation_chart(validation).write(&plot)?;
                println!(
                    "predicted vs measured step time plotted in {}",
                    plot.display()
                );
                if validation.memory_measured() {
                    let stem = plot
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let memory = plot.with_file_name(format!("{stem}-memory.svg"));
                    memory_chart(validation).write(&memory)?;
                    println!(
                        "predicted vs measured peak memory plotted in {}",
                        memory.display()
                    );
                }
            }
            None => println!("(no plot written: give --json or --plot)"),
        }
    }
    Ok(())
}

fn output_error(path: &Path, err: serde_json::Error) -> CliError {
    CliError::Output {
        path: path.to_path_buf(),
        source: std::io::Error::other(err),
    }
}

/// Runs `plans` on this machine's mesh (worker threads on `backend`) with a progress bar;
/// measures `in_turn`'s profile again before the validation and after every round.
fn validate(
    backend: BackendChoice,
    shape: &ModelShape,
    workload: &Workload,
    plans: &[Plan],
    options: ValidationOptions,
    in_turn: Option<InTurn<'_>>,
) -> Result<ValidationReport> {
    backend.run(ValidateJob {
        shape,
        workload,
        plans,
        options,
        in_turn,
    })
}

/// [`validate_plans_in_turn`] with a progress bar, on the chosen backend.
struct ValidateJob<'a> {
    shape: &'a ModelShape,
    workload: &'a Workload,
    plans: &'a [Plan],
    options: ValidationOptions,
    /// The measured profile to measure again in turns with the plans (before the validation
    /// and after every round), and what the plans were searched with.
    in_turn: Option<InTurn<'a>>,
}

impl BackendJob for ValidateJob<'_> {
    type Output = ValidationReport;

    fn run<B: ContextParallelBackend>(
        self,
        _backend: BackendChoice,
        devices: Vec<B::Device>,
        meter: Arc<dyn MemoryMeter>,
    ) -> Result<Self::Output> {
        let options = &self.options;
        let total = self
            .plans
            .iter()
            .map(|plan| options.steps_per_plan(plan))
            .sum();
        let mut announced = None;
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| progress_bar(total, "validating [{bar:30}] {pos}/{len} steps {msg}"));
        let mut progress = |p: ValidationProgress| match &bar {
            Some(bar) => {
                bar.inc(1);
                bar.set_message(format!("plan {}/{}", p.plan + 1, p.plans));
            }
            None => {
                if announced != Some(p.round) {
                    announced = Some(p.round);
                    eprintln!("validation round {}/{}", p.round + 1, p.rounds);
                }
            }
        };
        let run = PlansToValidate {
            shape: self.shape,
            workload: self.workload,
            plans: self.plans,
            options,
        };
        let report = validate_plans_in_turn::<B>(run, &devices[0], meter, self.in_turn, &mut progress);
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        Ok(report?)
    }
}

/// Predicted (x) against measured (y) step seconds, one point per plan, with `y = x`.
fn validation_chart(validation: &ValidationReport) -> Chart {
    predicted_vs_measured(
        validation,
        "step time",
        ("predicted seconds per step", "measured seconds per step"),
        |p| Some((p.predicted.step_seconds, p.measured_step_seconds()?)),
    )
}

/// Predicted (x) against measured (y) peak MB per device, one point per plan, with `y = x`.
fn memory_chart(validation: &ValidationReport) -> Chart {
    predicted_vs_measured(
        validation,
        "peak memory per device",
        ("predicted MB per device", "measured MB per device"),
        |p| {
            let measured = p.measured_peak_bytes_per_device()?;
            Some((
                p.predicted.peak_bytes_per_device as f64 / 1e6,
                measured as f64 / 1e6,
            ))
        },
    )
}

/// A chart of `point(plan)` (predicted, measured) for every validated plan that has one, with
/// `y = x`; `what` names the quantity in the title.
fn predicted_vs_measured(
    validation: &ValidationReport,
    what: &str,
    (x_label, y_label): (&str, &str),
    point: impl Fn(&Plan) -> Option<(f64, f64)>,
) -> Chart {
    let title = format!(
        "Predicted vs measured {what} ({} x {} nodes per step)",
        validation.sequences_per_step, validation.seq_len
    );
    let mut chart = Chart::new(title, x_label, y_label).with_diagonal();
    for row in &validation.plans {
        let p = &row.plan;
        if let Some(point) = point(p) {
            chart = chart.with_series(Series::new(
                format!(
                    "pp={} cp={} dp={} m={}",
                    p.layout.pp, p.layout.cp, p.layout.dp, p.layout.micro_batches
                ),
                vec![point],
                SeriesStyle::Points,
            ));
        }
    }
    chart
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Command {
        let cli = Cli::try_parse_from(std::iter::once("megagraph").chain(args.iter().copied()));
        cli.unwrap_or_else(|e| panic!("{e}")).command
    }

    #[test]
    fn plan_sizes_the_model_and_steps_that_train_does_by_default() {
        let Command::Plan(plan) = parse(&["plan", "--cluster", "c.toml"]) else {
            panic!("not a plan command")
        };
        let Command::Train(train) = parse(&["train"]) else {
            panic!("not a train command")
        };
        let train = train.to_config().unwrap_or_else(|e| panic!("{e}"));
        let model = train.model_config(Some(plan.model.feature_dim), 1, plan.model.classes);
        assert_eq!(plan.model.shape(), megagraph_calibrate::model_shape(&model));
        assert_eq!(plan.seq_len, train.data.seq_len);
        assert_eq!(plan.sequences_per_step, train.training.batch_size);

        // and the same flags size the same model
        let flags = ["--preset", "paper", "--layers", "3", "--hidden", "32"];
        let Command::Plan(plan) = parse(&[&["plan", "--cluster", "c.toml"], &flags[..]].concat()) else {
            panic!("not a plan command")
        };
        let Command::Train(train) = parse(&[&["train"], &flags[..]].concat()) else {
            panic!("not a train command")
        };
        let train = train.to_config().unwrap_or_else(|e| panic!("{e}"));
        let model = train.model_config(Some(plan.model.feature_dim), 1, plan.model.classes);
        assert_eq!((model.num_layers, model.num_heads, model.hidden), (3, 8, 32));
        assert_eq!(plan.model.shape(), megagraph_calibrate::model_shape(&model));
    }
}

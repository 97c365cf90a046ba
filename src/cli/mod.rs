//! The `megagraph` command line.

mod backend;
mod error;
mod eval;
mod model_spec;
mod nodes;
mod orchestrator;
mod plan;
mod profile;
mod temporal;
mod temporal_compare;
mod temporal_plan;
mod train;
mod train_progress;
mod tune;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use megagraph_models::ModelPreset;

use eval::EvalArgs;
use nodes::NodeArgs;
use orchestrator::OrchestratorArgs;
use plan::PlanArgs;
use profile::ProfileArgs;
use temporal::TemporalArgs;
use train::TrainArgs;
use tune::TuneArgs;

use megagraph_train::ModelConfig;
use error::Result;

/// A progress bar of `len` steps drawn with `template` (indicatif's syntax; the default bar
/// when the template does not parse), in the command line's one style.
fn progress_bar(len: usize, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

/// Model-size flags shared by `train`, `plan` and `profile`: a preset and overrides of its
/// sizes. Unset, each keeps the value of the config (`[model]`, whose defaults are
/// [`ModelConfig::default`]'s), so every command sizes the same model by default.
#[derive(Debug, Args)]
pub struct ModelShapeArgs {
    /// Model size preset (default: small, or the config file's).
    #[arg(long, value_name = "NAME", value_parser = preset_parser())]
    pub preset: Option<ModelPreset>,
    /// Number of transformer layers.
    #[arg(long, value_name = "L")]
    pub layers: Option<usize>,
    /// Number of attention heads.
    #[arg(long, value_name = "H")]
    pub heads: Option<usize>,
    /// Model width.
    #[arg(long, value_name = "D")]
    pub hidden: Option<usize>,
    /// FFN hidden width.
    #[arg(long, value_name = "D")]
    pub ffn_hidden: Option<usize>,
}

impl ModelShapeArgs {
    /// Sets the given flags on `model`, keeping its values for the others.
    pub fn apply(&self, model: &mut ModelConfig) {
        if let Some(preset) = self.preset {
            model.preset = preset;
        }
        for (slot, flag) in [
            (&mut model.layers, self.layers),
            (&mut model.heads, self.heads),
            (&mut model.hidden, self.hidden),
            (&mut model.ffn_hidden, self.ffn_hidden),
        ] {
            if flag.is_some() {
                *slot = flag;
            }
        }
    }
}

/// `--preset`: one of [`ModelPreset::ALL`] by name (`--help` lists them).
fn preset_parser() -> impl TypedValueParser<Value = ModelPreset> {
    PossibleValuesParser::new(ModelPreset::ALL.map(|(name, _)| name))
        // the names were checked against the same list: no default is ever taken
        .map(|name| ModelPreset::from_name(&name).unwrap_or_default())
}

/// Train Graph Transformers on large graphs.
#[derive(Debug, Parser)]
#[command(
    name = "megagraph",
    version,
    about = "Train Graph Transformers on graphs too large for one device, and plan their parallel layout.",
    long_about = None,
    after_help = "Examples:\n  \
      megagraph train                                    # the built-in synthetic graph\n  \
      megagraph train --dataset DIR --plot plots         # an OGB-layout dataset, with SVG curves\n  \
      megagraph train --config configs/train/cora.toml   # every option from a file\n  \
      megagraph plan --cluster configs/clusters/h200-8x-nvlink.toml --preset paper --seq-len 262144\n  \
      megagraph temporal train --model tgn --dataset ../shared/datasets/temporal/wikipedia\n\n\
      `megagraph <COMMAND> --help` lists a command's options."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// parsed once per process: the size difference between `Train` and the others costs nothing
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Train a Graph Transformer for node classification and report its accuracy.
    ///
    /// With no arguments it trains on the built-in synthetic graph. Flags override the config
    /// file, which overrides the defaults.
    Train(Box<TrainArgs>),
    /// Train several seeds of one configuration and report test accuracy as mean ± std
    /// (a table, and JSON with --json).
    Eval(Box<EvalArgs>),
    /// Search hyperparameters (a TOML search space: grid or seeded random) scored on validation
    /// accuracy; writes the best config, a JSON and SVG summary, and resumes after a kill.
    Tune(Box<TuneArgs>),
    /// Choose a parallel plan (pp x cp x dp, micro-batches, layer split) for a model on a cluster
    /// and explain the choice.
    Plan(PlanArgs),
    /// Measure the time and memory of the model's parts on this machine (cached) and print the
    /// profile that `plan --profile measured` uses.
    Profile(ProfileArgs),
    /// Run the orchestrator of a multi-node run: the nodes register with it to find each other
    /// (see the README, "Several machines"). Runs until Ctrl-C.
    Orchestrator(OrchestratorArgs),
    /// Temporal GNNs (TGN, JODIE, APAN, TGAT, DySAT): link prediction on event streams.
    Temporal(TemporalArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train::train(
            &args.to_config()?,
            args.nodes.to_node_config()?,
            args.backend,
            args.devices,
        ),
        Command::Eval(args) => eval::eval(&args),
        Command::Tune(args) => tune::tune(*args),
        Command::Plan(args) => plan::plan(&args),
        Command::Profile(args) => profile::profile(&args),
        Command::Orchestrator(args) => orchestrator::orchestrator(&args),
        Command::Temporal(args) => temporal::temporal(&args),
    }
}

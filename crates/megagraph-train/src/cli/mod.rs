//! The `megagraph` command line.

mod plan;
mod train;

use clap::{Parser, Subcommand};

pub use plan::PlanArgs;
pub use train::{ScopeArg, SequenceArg, TrainArgs};

use crate::error::Result;

/// Train Graph Transformers on large graphs.
#[derive(Debug, Parser)]
#[command(name = "megagraph", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a Graph Transformer for node classification and report its accuracy.
    ///
    /// With no arguments it trains on the built-in synthetic graph. Flags override the config
    /// file, which overrides the defaults.
    Train(TrainArgs),
    /// Choose a parallel plan (pp x cp x dp, micro-batches, layer split) for a model on a cluster
    /// and explain the choice.
    Plan(PlanArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train::train(&args.to_config()?),
        Command::Plan(args) => plan::plan(&args),
    }
}

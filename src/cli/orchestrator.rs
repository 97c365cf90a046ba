//! `megagraph orchestrator`: the meeting point of the nodes of a multi-node run.

use clap::Args;

use super::error::Result;

/// Options of `megagraph orchestrator`.
#[derive(Debug, Args)]
pub struct OrchestratorArgs {
    /// Port to listen on (all interfaces); the nodes' `--orchestrator HOST:PORT` points here.
    #[arg(long, value_name = "P")]
    pub port: u16,
}

/// Runs burn-collective's orchestrator until Ctrl-C or SIGTERM.
pub fn orchestrator(args: &OrchestratorArgs) -> Result<()> {
    let orchestrator = megagraph_parallel::Orchestrator::new(args.port)?;
    eprintln!(
        "orchestrator listening on port {} (all interfaces); stop it with Ctrl-C once the nodes have finished",
        orchestrator.port()
    );
    orchestrator.run();
    Ok(())
}

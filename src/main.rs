//! The `megagraph` command line: `megagraph train`, ... (see `megagraph --help`).

use clap::Parser;

/// Per-thread memory accounting: what the parallel runtime reports per rank and the profiler
/// measures per part.
#[global_allocator]
static ALLOCATOR: megagraph::parallel::CountingAllocator = megagraph::parallel::CountingAllocator;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = megagraph::train::cli::Cli::parse();
    if let Err(err) = megagraph::train::cli::run(cli) {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

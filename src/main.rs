//! The `megagraph` command line: `megagraph train`, ... (see `megagraph --help`).

use clap::Parser;

mod cli;

/// Per-thread memory accounting: what the parallel runtime reports per rank and the profiler
/// measures per part.
#[global_allocator]
static ALLOCATOR: megagraph::parallel::CountingAllocator = megagraph::parallel::CountingAllocator;

/// Fixes glibc's malloc thresholds: large blocks (up to 32 MiB) come from the heap and freed
/// memory is kept (up to 1 GiB at the top of the heap) instead of glibc adapting both as the
/// process runs. With the adaptive thresholds, the same pass could take 1.6 times as long
/// depending on what the process had allocated before (the profiler's attention backward at
/// 2048-row blocks: 222 or 140 ms, in 4 of 6 profiles the slow one); fixed, every profile
/// and every run sees the same allocator.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_malloc_thresholds() {
    // SAFETY: mallopt only sets parameters of the allocator; it runs first in main, before
    // any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// CubeCL's autotune level for the GPU backends (`--backend cuda|wgpu`) where the environment
/// names none: `minimal`. At CubeCL's default (`balanced`) the tuner compiles and times every
/// variant for each new matrix-product shape: about 25 s per shape on an H200, and 77 s before a
/// small model's first step on wgpu against 34 s at `minimal`, with the same losses and step
/// times after it. The model's matrix products are narrow (hidden width 64) and the attention
/// kernels are not autotuned. `CUBECL_AUTOTUNE_LEVEL=balanced` restores CubeCL's default (the
/// variable also overrides a `cubecl.toml`).
fn default_autotune_level() {
    if std::env::var_os("CUBECL_AUTOTUNE_LEVEL").is_none() {
        // SAFETY: runs first in main, before any other thread exists.
        unsafe { std::env::set_var("CUBECL_AUTOTUNE_LEVEL", "minimal") };
    }
}

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fix_malloc_thresholds();
    default_autotune_level();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = cli::Cli::parse();
    if let Err(err) = cli::run(cli) {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

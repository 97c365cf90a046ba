use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use megagraph_calibrate::{
    CacheStatus, MemoryMeter, ProfileProgress, ProfilerOptions, cached_profile, ladder_points,
    measure_profile,
};
use megagraph_graph::default_cache_dir;
use megagraph_parallel::ContextParallelBackend;
use megagraph_planner::{ClusterSpec, ModelShape, ProfileKey, ProfileLadder, ProfileTable};

use super::backend::{BackendChoice, BackendJob};
use super::model_spec::ModelSpecArgs;
use super::progress_bar;
use super::error::{CliError, Result};
use megagraph_train::files::write_json_atomically;

/// How profiles are measured (shared by `megagraph profile` and `megagraph plan --profile
/// measured`).
#[derive(Debug, Args)]
pub struct ProfilingArgs {
    /// Backend to measure (and validate) on; its name keys the profile.
    #[arg(long, value_enum, value_name = "NAME", default_value = "flex")]
    pub backend: BackendChoice,
    /// Measure again even when a cached profile exists.
    #[arg(long)]
    pub refresh: bool,
    /// Timed runs per part and size (the median is kept).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub repeats: usize,
    /// Untimed warm-up runs per part and size.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub warmup: usize,
    /// Copies of every measurement run at once (the ranks that share this machine). Default:
    /// the cluster's devices per node on flex, 1 on a GPU backend (each rank has its own).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Row counts to measure (comma-separated). Default: 64..8192 (CUDA: 512..65536).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    pub rows: Option<Vec<usize>>,
    /// Attention block edges to measure (comma-separated). Default: 32..2048 (CUDA:
    /// 128..16384).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',')]
    pub blocks: Option<Vec<usize>>,
    /// MiB written between each forward and backward pass to evict the CPU caches. A layer's
    /// backward runs after every later layer of its stage: when the activations the stage
    /// touches in between exceed the last-level cache, give about twice its size. Default 0
    /// (warm caches): with a 480 MiB L3, a 64 MiB eviction cooled the small sizes and made
    /// plans of many micro-batches at S = 256 predict 15-25% slow. Not used on `--backend cuda`.
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub evict_mib: usize,
    /// Cache folder (default: $MEGAGRAPH_CACHE, else ~/.cache/megagraph).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// Options of `megagraph profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Cluster description (TOML) of this machine; its device name keys the profile.
    #[arg(
        long,
        value_name = "FILE.toml",
        default_value = "configs/clusters/cpu-local.toml"
    )]
    pub cluster: PathBuf,
    /// The model.
    #[command(flatten)]
    pub model: ModelSpecArgs,
    /// How to measure.
    #[command(flatten)]
    pub profiling: ProfilingArgs,
    /// Also write the table as JSON here.
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<PathBuf>,
}

impl ProfilingArgs {
    /// A note for a plan whose ranks hold `peak_bytes` each, more than this machine's
    /// last-level cache of `cache_bytes`, when the profile is measured on the CPU with warm
    /// caches: such a stage's backward passes find their activations out of the cache, so the
    /// profile's times are low for it. `None` otherwise (or without a known cache size).
    pub fn warm_cache_note(&self, peak_bytes: u64, cache_bytes: Option<u64>) -> Option<String> {
        let cache = cache_bytes.filter(|&cache| cache > 0)?;
        if !self.backend.is_cpu() || self.evict_mib > 0 || peak_bytes <= cache {
            return None;
        }
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        Some(format!(
            "note: each rank of the best plan holds {} MiB, more than this machine's {} MiB \
             last-level cache, and the profile timed backward passes with warm caches; \
             `--evict-mib {}` times them cooled, as a stage this large runs them",
            mib(peak_bytes),
            mib(cache),
            2 * mib(cache)
        ))
    }

    /// The profiler options for `cluster`.
    pub fn options(&self, cluster: &ClusterSpec) -> Result<ProfilerOptions> {
        let defaults = match self.backend {
            BackendChoice::Cuda => ProfilerOptions::gpu_ladder(),
            BackendChoice::Flex | BackendChoice::Wgpu => ProfilerOptions::cpu_ladder(),
        };
        let options = ProfilerOptions {
            ladder: ProfileLadder {
                rows: self.rows.clone().unwrap_or(defaults.rows),
                blocks: self.blocks.clone().unwrap_or(defaults.blocks),
                ..defaults
            },
            warmup: self.warmup,
            repeats: self.repeats,
            // CPU workers share this machine; GPUs are a device each
            concurrency: self.concurrency.unwrap_or(if self.backend.is_cpu() {
                cluster.devices_per_node
            } else {
                1
            }),
            evict_bytes: if self.backend == BackendChoice::Cuda {
                0
            } else {
                self.evict_mib << 20
            },
            ..ProfilerOptions::default()
        };
        for (flag, value) in [
            ("repeats", options.repeats),
            ("concurrency", options.concurrency),
        ] {
            if value == 0 {
                return Err(CliError::flag(flag, "must be at least 1"));
            }
        }
        Ok(options)
    }
}

/// The measured profile of `shape` on this machine for `cluster`'s devices: from the cache, or
/// measured (with a progress bar on a terminal) and cached.
pub fn measured_profile(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    args: &ProfilingArgs,
) -> Result<(ProfileTable, PathBuf, CacheStatus)> {
    if cluster.nodes > 1 {
        log::warn!(
            "cluster `{}` has {} nodes: a profile measured here stands for its devices only if \
             they are like this machine's",
            cluster.name,
            cluster.nodes
        );
    }
    args.backend.check()?;
    let options = args.options(cluster)?;
    let key = ProfileKey::new(args.backend.name(), cluster.device.clone(), shape, 4);
    let dir = args.cache_dir.clone().unwrap_or_else(default_cache_dir);
    let found = cached_profile(&dir, &key, &options, args.refresh, || {
        eprintln!(
            "measuring the profile of {} on {} ({} copies at once); cached in {}",
            key.cache_key(),
            args.backend.name(),
            options.concurrency,
            dir.display()
        );
        args.backend
            .run(MeasureJob {
                shape,
                device_name: &cluster.device,
                options: &options,
            })
            .map_err(|error| megagraph_calibrate::MeasureError::Backend(error.to_string()))?
    })?;
    Ok(found)
}

/// [`measure_profile`] with a progress bar, on the chosen backend.
struct MeasureJob<'a> {
    shape: &'a ModelShape,
    device_name: &'a str,
    options: &'a ProfilerOptions,
}

impl BackendJob for MeasureJob<'_> {
    type Output = std::result::Result<ProfileTable, megagraph_calibrate::MeasureError>;

    fn run<B: ContextParallelBackend>(
        self,
        backend: BackendChoice,
        devices: Vec<B::Device>,
        meter: Arc<dyn MemoryMeter>,
    ) -> Result<Self::Output> {
        let total = ladder_points(&self.options.ladder).len()
            * (self.options.warmup + self.options.repeats);
        // without a terminal, a line every 5%
        let every = (total / 20).max(1);
        let terminal = std::io::stderr().is_terminal();
        let bar = terminal.then(|| progress_bar(total, "profiling [{bar:30}] {pos}/{len} {msg}"));
        let mut progress = |p: ProfileProgress| match &bar {
            Some(bar) => {
                bar.set_position(p.done as u64);
                bar.set_message(format!("{} {}x{}", p.part.name(), p.batch, p.size));
            }
            None => {
                if p.done.is_multiple_of(every) || p.done == p.total {
                    eprintln!(
                        "profiled {}/{} ({} {})",
                        p.done,
                        p.total,
                        p.part.name(),
                        p.size
                    );
                }
            }
        };
        let table = measure_profile::<B>(
            self.shape,
            backend.name(),
            self.device_name,
            &devices[0],
            meter,
            self.options,
            &mut progress,
        );
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        Ok(table)
    }
}

/// `megagraph profile`: measures (or reads from the cache) the profile of a model on this
/// machine, prints it and optionally writes it as JSON.
pub fn profile(args: &ProfileArgs) -> Result<()> {
    let cluster =
        ClusterSpec::from_toml_file(&args.cluster).map_err(megagraph_planner::PlanError::from)?;
    let shape = args.model.shape();
    let (table, path, status) = measured_profile(&cluster, &shape, &args.profiling)?;
    println!("{table}");
    match status {
        CacheStatus::Hit => println!("read from the cache: {}", path.display()),
        CacheStatus::Measured => println!("measured and cached: {}", path.display()),
        CacheStatus::Remeasured(reason) => println!(
            "measured again (the cached file could not be used: {reason}) and cached: {}",
            path.display()
        ),
    }
    if let Some(out) = &args.json {
        write_json_atomically(out, &table)?;
        println!("profile written to {}", out.display());
    }
    Ok(())
}

/// The size of this machine's largest CPU cache in bytes (on Linux, the largest
/// `/sys/devices/system/cpu/cpu0/cache/index*/size`); `None` where it cannot be read.
pub fn last_level_cache_bytes() -> Option<u64> {
    std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache")
        .ok()?
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("size")).ok())
        .filter_map(|size| parse_cache_size(&size))
        .max()
}

/// A cache size as sysfs writes it: `480M`, `32768K`, `1G` or plain bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let scale: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        profiling: ProfilingArgs,
    }

    fn profiling(args: &[&str]) -> ProfilingArgs {
        Cli::parse_from(std::iter::once("megagraph").chain(args.iter().copied())).profiling
    }

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("480M\n"), Some(480 << 20));
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size("512"), Some(512));
        for bad in ["", "M", "12 MB", "-4K", "99999999999999999999G"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_plan_larger_than_the_cache_is_noted_only_with_warm_caches_on_the_cpu() {
        let (cache, small, large) = (Some(32 << 20), 20 << 20, 100 << 20);
        let note = profiling(&[]).warm_cache_note(large, cache).unwrap();
        assert!(
            note.contains("holds 100 MiB")
                && note.contains("32 MiB")
                && note.contains("--evict-mib 64"),
            "{note}"
        );
        assert_eq!(profiling(&[]).warm_cache_note(small, cache), None);
        assert_eq!(profiling(&[]).warm_cache_note(large, None), None);
        assert_eq!(
            profiling(&["--evict-mib", "64"]).warm_cache_note(large, cache),
            None
        );
        assert_eq!(
            profiling(&["--backend", "cuda"]).warm_cache_note(large, cache),
            None
        );
    }
}

//! The real profiler: times the forward and backward passes of the model's parts (see
//! [`ProfiledPart`]) on a Burn backend over a ladder of sizes and measures their memory, filling
//! a [`ProfileTable`] that the cost model then fits.
//!
//! How it measures is described on [`measure_profile`].

mod cache;
mod in_turn;
mod lockstep;
mod measure;
mod options;
mod parts;

pub use cache::{CacheStatus, cached_profile, measured_cache_path};
pub use in_turn::InTurnProfile;
pub use options::{MeasureError, ProfileProgress, ProfilerOptions, ladder_points};

use crate::overhead::runtime_overhead_bytes;
use measure::{measure_jobs, median, solo_ratios};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_planner::{ModelShape, ProfileKey, ProfileSample, ProfileTable, ProfiledPart};
use options::sizes;
use parts::Run;
use std::sync::Arc;

/// Measures the [`ProfileTable`] of `shape` on backend `B` at `device`, keyed by `backend` and
/// `device_name` (e.g. `flex`, the cluster's device name), with 4-byte (f32) elements.
///
/// `progress` is called after every part and size.
///
/// # How
///
/// - [`measure_profile`] builds the real modules of `megagraph-models` for a [`ModelShape`]
///   (one layer suffices: every part is per layer or per model), feeds them random inputs (a
///   random `u8` distance index, random features), and runs the whole ladder of parts and
///   sizes pass after pass: a few warm-up passes, then timed ones, keeping each point's median
///   (so that a drift of the machine's speed during the profile moves every point alike).
///   Memory is read with a [`MemoryMeter`]: on CPU backends [`ThreadAllocatorMeter`](crate::ThreadAllocatorMeter), the
///   parallel runtime's per-thread accounting, so the profile's bytes are what a rank reports;
///   on GPU backends the CubeCL runtime's statistics
///   (`megagraph_parallel::meter::CubeMemoryMeter`, features `cuda` / `wgpu`), which the
///   runtime overhead step then uses too.
/// - With [`ProfilerOptions::concurrency`] `> 1`, that many copies of every measurement run at
///   once, as the ranks of a mesh do when they share one machine's memory bandwidth, in
///   lockstep: every copy starts each forward and each backward pass at the same moment, as
///   the data- and context-parallel ranks of a layer do; the table holds the first copy's
///   numbers. (Lockstep mattered on Burn 0.21.0's autodiff as published: a backward pass ended
///   by locking every autodiff graph of the process, so a copy whose backward pass ended while a
///   peer's was half done also timed the rest of the peer's; see
///   [`megagraph_planner::BackwardOverlap`]. megagraph's patched autodiff no longer waits.) Every copy runs in its
///   own rayon pool of `cores / copies` threads, the slice of the cores a rank of the parallel
///   runtime gets by default ([`megagraph_parallel::threads`]).
///   Every timed run is then repeated by the first copy alone while the others wait: the
///   table's [`solo`](ProfileTable::solo) ratios (time alone over time together, the median
///   over each part's points) let the pipeline schedule run a stage faster while the other
///   stages of its machine wait ([`megagraph_planner::MachineSharing`]).
/// - The runtime's own memory (what a rank holds beyond the parts: autodiff and optimizer
///   bookkeeping) is measured with one real training step of a one-layer model at the smallest
///   size on the parallel runtime ([`ProfileTable::runtime_overhead_bytes`]).
/// - [`InTurnProfile`] measures the points of a profile again, the same way, in sessions that
///   take turns with other work: `plan --validate` measures one before the validation and one
///   after each of its rounds, so that predictions from it see the machine's speed while the
///   plans ran (a shared machine's speed drifts between a profile and a validation).
/// - On Linux with glibc, the allocator's adaptive thresholds can make the same large pass
///   take 1.6 times as long depending on what the process allocated before; the `megagraph`
///   binary fixes them with `mallopt` first thing in `main`, and a program of its own that
///   profiles can do the same (or set `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`).
/// - [`cached_profile`] returns the cached table for a key and ladder, or measures and caches it
///   (JSON, written atomically; a corrupt or mismatching cache file is measured again with a
///   warning).
///
/// # Errors
///
/// [`MeasureError`]: an invalid shape, ladder or option, a meter that cannot measure, or a
/// failed measurement.
pub fn measure_profile<B: ContextParallelBackend>(
    shape: &ModelShape,
    backend: &str,
    device_name: &str,
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    options: &ProfilerOptions,
    progress: &mut dyn FnMut(ProfileProgress),
) -> Result<ProfileTable, MeasureError> {
    shape.validate()?;
    options.check()?;
    if !meter.available() {
        return Err(MeasureError::NoMemoryMeter {
            meter: format!("{meter:?}"),
        });
    }
    sizes("rows", &options.ladder.rows)?;
    sizes("blocks", &options.ladder.blocks)?;
    let jobs = ladder_points(&options.ladder);
    let total = jobs.len() * (options.warmup + options.repeats);
    let mut table = ProfileTable {
        key: ProfileKey::new(backend, device_name, shape, 4),
        analytic: false,
        embedding: Vec::new(),
        layer_dense: Vec::new(),
        attention: Vec::new(),
        head: Vec::new(),
        runtime_overhead_bytes: 0,
        solo: None,
    };
    let first = measure_jobs::<B>(
        shape,
        device,
        meter.as_ref(),
        options,
        &jobs,
        &mut |pass, index| {
            let (part, batch, size) = jobs[index];
            progress(ProfileProgress {
                part,
                batch,
                size,
                done: pass * jobs.len() + index + 1,
                total,
            });
        },
    )?;
    table.solo = solo_ratios(options.concurrency, &jobs, &first);
    for (&(part, batch, size), mut runs) in jobs.iter().zip(first) {
        let last = runs.last.unwrap_or(Run {
            forward_seconds: 0.0,
            backward_seconds: 0.0,
            saved_bytes: 0,
            peak_bytes: 0,
        });
        let sample = ProfileSample {
            size,
            forward_seconds: median(&mut runs.forward),
            backward_seconds: median(&mut runs.backward),
            saved_bytes: last.saved_bytes,
            peak_bytes: last.peak_bytes,
            batch,
        };
        match part {
            ProfiledPart::Embedding => table.embedding.push(sample),
            ProfiledPart::LayerDense => table.layer_dense.push(sample),
            ProfiledPart::Attention => table.attention.push(sample),
            ProfiledPart::Head => table.head.push(sample),
        }
    }
    table.validate()?;
    let seq_len = options.ladder.row_points().first().copied().unwrap_or(64);
    table.runtime_overhead_bytes =
        runtime_overhead_bytes::<B>(&table, shape, seq_len, device, meter, options.seed)?;
    Ok(table)
}

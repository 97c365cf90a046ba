//! The real profiler: times the forward and backward passes of the model's parts (see
//! [`ProfiledPart`]) on a Burn backend over a ladder of sizes and measures their memory, filling
//! a [`ProfileTable`] that the cost model then fits.
//!
//! - [`measure_profile`] builds the real modules of `megagraph-models` for a [`ModelShape`]
//!   (one layer suffices: every part is per layer or per model), feeds them random inputs (a
//!   random `u8` distance index, random features), and runs the whole ladder of parts and
//!   sizes pass after pass: a few warm-up passes, then timed ones, keeping each point's median
//!   (so that a drift of the machine's speed during the profile moves every point alike).
//!   Memory is read with a [`MemoryMeter`]: on CPU backends [`ThreadAllocatorMeter`], the
//!   parallel runtime's per-thread accounting, so the profile's bytes are what a rank reports;
//!   on GPU backends the CubeCL runtime's statistics
//!   (`megagraph_parallel::meter::CubeMemoryMeter`, features `cuda` / `wgpu`), which the
//!   runtime overhead step then uses too.
//! - With [`ProfilerOptions::concurrency`] `> 1`, that many copies of every measurement run at
//!   once, as the ranks of a mesh do when they share one machine's memory bandwidth, in
//!   lockstep: every copy starts each forward and each backward pass at the same moment, as
//!   the data- and context-parallel ranks of a layer do; the table holds the first copy's
//!   numbers. (Lockstep matters on Burn 0.21: a backward pass ends by locking every autodiff
//!   graph of the process, so a copy whose backward pass ended while a peer's was half done
//!   would also time the rest of the peer's; see [`crate::schedule`].) Every copy runs in its
//!   own rayon pool of `cores / copies` threads, the slice of the cores a rank of the parallel
//!   runtime gets by default ([`megagraph_parallel::threads`]).
//!   Every timed run is then repeated by the first copy alone while the others wait: the
//!   table's [`solo`](ProfileTable::solo) ratios (time alone over time together, the median
//!   over each part's points) let the pipeline schedule run a stage faster while the other
//!   stages of its machine wait ([`crate::sharing`]).
//! - The runtime's own memory (what a rank holds beyond the parts: autodiff and optimizer
//!   bookkeeping) is measured with one real training step of a one-layer model at the smallest
//!   size on the parallel runtime ([`ProfileTable::runtime_overhead_bytes`]).
//! - [`InTurnProfile`] measures the points of a profile again, the same way, in sessions that
//!   take turns with other work: `plan --validate` measures one before the validation and one
//!   after each of its rounds, so that predictions from it see the machine's speed while the
//!   plans ran (a shared machine's speed drifts between a profile and a validation).
//! - On Linux with glibc, the allocator's adaptive thresholds can make the same large pass
//!   take 1.6 times as long depending on what the process allocated before; the `megagraph`
//!   binary fixes them with `mallopt` first thing in `main`, and a program of its own that
//!   profiles can do the same (or set `MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_`).
//! - [`cached_profile`] returns the cached table for a key and ladder, or measures and caches it
//!   (JSON, written atomically; a corrupt or mismatching cache file is measured again with a
//!   warning).

mod cache;
mod in_turn;
mod parts;

pub use cache::{CacheStatus, cached_profile, measured_cache_path};
pub use in_turn::InTurnProfile;
pub use megagraph_parallel::{MemoryMeter, ThreadAllocatorMeter};

use crate::fitted::FittedProfile;
use crate::latency::FitOptions;
use crate::memory::MemoryModel;
use crate::mesh::Mesh;
use crate::profile::{
    ProfileError, ProfileKey, ProfileLadder, ProfileSample, ProfileTable, ProfiledPart,
};
use crate::search::Plan;
use crate::sharing::{PassRatios, SoloRatios};
use crate::validate::{ValidationOptions, validate_plans};
use crate::workload::{ModelShape, Workload, WorkloadError};
use megagraph_kernels::AttentionError;
use megagraph_parallel::ContextParallelBackend;
use megagraph_parallel::threads::{default_threads_per_rank, panic_message, run_in_pool};
use parts::{PartBench, Run};
use serde::{Deserialize, Serialize};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

/// How [`measure_profile`] measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfilerOptions {
    /// Sizes to measure: `rows` for the embedding, dense-layer and head parts, `blocks` for the
    /// attention block edge. Default: [`ProfilerOptions::cpu_ladder`].
    pub ladder: ProfileLadder,
    /// Untimed runs before the timed ones, per part and size. Default: 2.
    pub warmup: usize,
    /// Timed runs per part and size; the median is kept. Default: 5.
    pub repeats: usize,
    /// Copies of every measurement run at once on separate threads (the ranks sharing this
    /// machine). Default: 1.
    pub concurrency: usize,
    /// Seed of the random inputs and parameters. Default: 7.
    pub seed: u64,
    /// Bytes written between each forward and backward pass to evict the caches (0: none), as
    /// happens in a real stage whose activations between a layer's forward and its backward
    /// exceed them. Default: 0.
    #[serde(default)]
    pub evict_bytes: usize,
}

/// Where [`measure_profile`] is: reported after every run of a part and size (the profiler
/// makes `warmup + repeats` passes over the whole ladder).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProfileProgress {
    /// The part just measured.
    pub part: ProfiledPart,
    /// Its batch (sequences).
    pub batch: usize,
    /// Its size.
    pub size: usize,
    /// Runs done so far.
    pub done: usize,
    /// Runs in all: ladder points times `warmup + repeats`.
    pub total: usize,
}

/// Why a profile could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The model shape is invalid.
    #[error("invalid model shape: {0}")]
    Shape(#[from] WorkloadError),
    /// The ladder has fewer than 2 distinct positive sizes for a part.
    #[error("profile ladder {which} = {sizes:?}: need at least 2 distinct positive sizes")]
    BadLadder {
        /// `rows` or `blocks`.
        which: &'static str,
        /// The offending sizes.
        sizes: Vec<usize>,
    },
    /// `repeats` or `concurrency` is 0.
    #[error("profiler option {field} = 0: it must be at least 1")]
    ZeroOption {
        /// The option.
        field: &'static str,
    },
    /// The memory meter cannot measure here.
    #[error(
        "memory cannot be measured: {meter} is not available (on CPU, install \
         megagraph_parallel::CountingAllocator as the program's #[global_allocator])"
    )]
    NoMemoryMeter {
        /// The meter (its `Debug` form).
        meter: String,
    },
    /// The attention op refused its inputs.
    #[error("attention op at block {size}: {source}")]
    Attention {
        /// The block edge.
        size: usize,
        /// The op's error.
        source: AttentionError,
    },
    /// A measuring thread panicked.
    #[error("profiling {part:?} at size {size} panicked: {message}")]
    Panicked {
        /// The part.
        part: ProfiledPart,
        /// The size.
        size: usize,
        /// The panic message.
        message: String,
    },
    /// A measuring thread panicked outside a measurement.
    #[error("a profiling thread panicked: {message}")]
    ThreadPanicked {
        /// The panic message.
        message: String,
    },
    /// The runtime overhead step failed.
    #[error("measuring the runtime's memory overhead (a one-layer training step): {0}")]
    Overhead(String),
    /// The backend could not be set up.
    #[error("the backend could not run the profile: {0}")]
    Backend(String),
    /// The measured table is invalid (e.g. a non-finite time).
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        Self {
            ladder: Self::cpu_ladder(),
            warmup: 2,
            repeats: 5,
            concurrency: 1,
            seed: 7,
            evict_bytes: 0,
        }
    }
}

impl ProfilerOptions {
    /// A ladder for CPU workers: rows 64 ..= 8192 and blocks 32 ..= 2048, powers of two with the
    /// midpoints `1.5 * 2^k` from 256 (where times leave the overhead-bound regime); attention
    /// at batches 1, 2, 4 and 8, above batch 1 up to `batch * block^2 = 2^23`.
    pub fn cpu_ladder() -> ProfileLadder {
        ProfileLadder {
            rows: doubling(6, 13, 256),
            blocks: doubling(5, 11, 256),
            attention_batches: vec![1, 2, 4, 8],
            max_attention_pairs: 1 << 23,
        }
    }

    /// A ladder for GPUs: rows 512 ..= 65536 and blocks 128 ..= 16384, powers of two with the
    /// midpoints from 2048 (below it a GPU is bound by launch overhead); attention at batches
    /// 1, 2, 4 and 8, above batch 1 up to `batch * block^2 = 2^28`.
    pub fn gpu_ladder() -> ProfileLadder {
        ProfileLadder {
            rows: doubling(9, 16, 2048),
            blocks: doubling(7, 14, 2048),
            attention_batches: vec![1, 2, 4, 8],
            max_attention_pairs: 1 << 28,
        }
    }
}

impl ProfilerOptions {
    /// [`MeasureError::ZeroOption`] when `repeats` or `concurrency` is 0.
    fn check(&self) -> Result<(), MeasureError> {
        for (field, value) in [("repeats", self.repeats), ("concurrency", self.concurrency)] {
            if value == 0 {
                return Err(MeasureError::ZeroOption { field });
            }
        }
        Ok(())
    }
}

/// `2^low ..= 2^high`, with the midpoint `1.5 * 2^p` after every power from `midpoints_from`.
fn doubling(low: u32, high: u32, midpoints_from: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    for p in low..=high {
        let size = 1usize << p;
        sizes.push(size);
        if size >= midpoints_from && p < high {
            sizes.push(size + size / 2);
        }
    }
    sizes
}

/// Every measurement of `ladder`: `(part, batch, size)` in table order.
pub fn jobs(ladder: &ProfileLadder) -> Vec<(ProfiledPart, usize, usize)> {
    let rows = ladder.row_points();
    let mut jobs = Vec::new();
    for part in ProfiledPart::ALL {
        if part == ProfiledPart::Attention {
            jobs.extend(
                ladder
                    .attention_points()
                    .into_iter()
                    .map(|(batch, size)| (part, batch, size)),
            );
        } else {
            jobs.extend(rows.iter().map(|&size| (part, 1, size)));
        }
    }
    jobs
}

/// Sorted distinct sizes of a ladder entry, or an error naming it.
fn sizes(which: &'static str, sizes: &[usize]) -> Result<Vec<usize>, MeasureError> {
    let mut distinct = sizes.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 || distinct[0] == 0 {
        return Err(MeasureError::BadLadder {
            which,
            sizes: sizes.to_vec(),
        });
    }
    Ok(distinct)
}

/// The meeting point of the profiler's copies before every timed pass: a barrier that a failing
/// copy breaks, releasing every waiter for good, so no copy waits for one that stopped.
struct Lockstep {
    copies: usize,
    /// Copies arrived at the current meeting, the meeting's number, and whether it is broken.
    state: Mutex<(usize, u64, bool)>,
    met: Condvar,
}

impl Lockstep {
    fn new(copies: usize) -> Self {
        Self {
            copies,
            state: Mutex::new((0, 0, false)),
            met: Condvar::new(),
        }
    }

    /// Waits until every copy arrived (or the barrier is broken).
    fn wait(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.2 {
            return;
        }
        let meeting = state.1;
        state.0 += 1;
        if state.0 == self.copies {
            state.0 = 0;
            state.1 += 1;
            self.met.notify_all();
            return;
        }
        while state.1 == meeting && !state.2 {
            state = self.met.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Releases every waiter, now and later.
    fn break_up(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).2 = true;
        self.met.notify_all();
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

/// Measures the [`ProfileTable`] of `shape` on backend `B` at `device`, keyed by `backend` and
/// `device_name` (e.g. `flex`, the cluster's device name), with 4-byte (f32) elements.
///
/// `progress` is called after every part and size.
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
    let jobs = jobs(&options.ladder);
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
    table.runtime_overhead_bytes = runtime_overhead::<B>(&table, shape, device, meter, options)?;
    Ok(table)
}

/// The [`SoloRatios`] of timed runs `runs` of `jobs` on `copies` copies: per part and pass,
/// the median over the part's points of the point's median time alone over its median time
/// with every copy computing. `None` with one copy, or when a part has no point measured both
/// ways with positive times.
fn solo_ratios(
    copies: usize,
    jobs: &[(ProfiledPart, usize, usize)],
    runs: &[JobRuns],
) -> Option<SoloRatios> {
    if copies < 2 {
        return None;
    }
    let ratio =
        |part: ProfiledPart, together: fn(&JobRuns) -> &[f64], alone: fn(&JobRuns) -> &[f64]| {
            let mut ratios: Vec<f64> = jobs
                .iter()
                .zip(runs)
                .filter(|((job_part, _, _), _)| *job_part == part)
                .filter_map(|(_, runs)| {
                    let (mut together, mut alone) = (together(runs).to_vec(), alone(runs).to_vec());
                    let (together, alone) = (median(&mut together), median(&mut alone));
                    (together > 0.0 && alone > 0.0).then(|| alone / together)
                })
                .collect();
            (!ratios.is_empty()).then(|| median(&mut ratios))
        };
    let pass = |part| {
        Some(PassRatios {
            forward: ratio(part, |r| &r.forward, |r| &r.solo_forward)?,
            backward: ratio(part, |r| &r.backward, |r| &r.solo_backward)?,
        })
    };
    Some(SoloRatios {
        copies,
        embedding: pass(ProfiledPart::Embedding)?,
        layer_dense: pass(ProfiledPart::LayerDense)?,
        attention: pass(ProfiledPart::Attention)?,
        head: pass(ProfiledPart::Head)?,
    })
}

/// The timed runs of one profiled point (part, batch and size) by the profiler's first copy.
#[derive(Clone, Debug, Default)]
struct JobRuns {
    /// Forward seconds of every timed run.
    forward: Vec<f64>,
    /// Backward seconds of every timed run.
    backward: Vec<f64>,
    /// Forward seconds of every timed run alone (the other copies waiting).
    solo_forward: Vec<f64>,
    /// Backward seconds of every timed run alone.
    solo_backward: Vec<f64>,
    /// The last timed run (its memory).
    last: Option<Run>,
}

/// Runs `jobs` pass after pass (`options.warmup` untimed passes, then `options.repeats` timed
/// ones) on `options.concurrency` copies in lockstep, and returns the first copy's timed runs
/// of each job. With more than one copy, every timed run is followed by one of the first copy
/// alone while the others wait. `done(pass, job)` is called after each of its runs.
fn measure_jobs<B: ContextParallelBackend>(
    shape: &ModelShape,
    device: &B::Device,
    meter: &dyn MemoryMeter,
    options: &ProfilerOptions,
    jobs: &[(ProfiledPart, usize, usize)],
    done: &mut dyn FnMut(usize, usize),
) -> Result<Vec<JobRuns>, MeasureError> {
    let copies = options.concurrency;
    // each copy on its own slice of the cores, as the parallel runtime runs its ranks
    let threads = default_threads_per_rank(copies);
    let lockstep = Lockstep::new(copies);
    let failed = AtomicBool::new(false);
    let failure: OnceLock<MeasureError> = OnceLock::new();
    // every copy keeps its modules for the whole ladder
    let results: Vec<Result<Vec<JobRuns>, MeasureError>> = std::thread::scope(|scope| {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(usize, usize)>();
        let handles: Vec<_> = (0..copies)
            .map(|copy| {
                let (lockstep, done_tx) = (&lockstep, done_tx.clone());
                let (failed, failure) = (&failed, &failure);
                let pool = format!("megagraph-profile-{copy}");
                scope.spawn(move || {
                    run_in_pool(threads, &pool, || {
                        let mut bench = PartBench::<B>::new(
                            shape,
                            device,
                            options.seed + copy as u64,
                            options.evict_bytes,
                        );
                        let mut runs = vec![JobRuns::default(); jobs.len()];
                        // pass after pass over the whole ladder, so that every point's samples
                        // spread over the whole profile and a drift of the machine's speed
                        // moves all points alike
                        'passes: for pass in 0..options.warmup + options.repeats {
                            for (index, &(part, batch, size)) in jobs.iter().enumerate() {
                                if failed.load(Ordering::Acquire) {
                                    break 'passes;
                                }
                                let timed = pass >= options.warmup;
                                // every copy runs every job, meeting the others before each pass
                                let together =
                                    measure_run(&mut bench, part, batch, size, meter, &|| {
                                        lockstep.wait()
                                    });
                                if let Some(run) = record(together, failed, failure, lockstep)
                                    && timed
                                {
                                    let runs = &mut runs[index];
                                    runs.forward.push(run.forward_seconds);
                                    runs.backward.push(run.backward_seconds);
                                    runs.last = Some(run);
                                }
                                // then the first copy alone, the others waiting for it
                                if timed && copies > 1 {
                                    if copy == 0 && !failed.load(Ordering::Acquire) {
                                        let alone = measure_run(
                                            &mut bench,
                                            part,
                                            batch,
                                            size,
                                            meter,
                                            &|| {},
                                        );
                                        if let Some(run) = record(alone, failed, failure, lockstep)
                                        {
                                            let runs = &mut runs[index];
                                            runs.solo_forward.push(run.forward_seconds);
                                            runs.solo_backward.push(run.backward_seconds);
                                        }
                                    }
                                    lockstep.wait();
                                }
                                if copy == 0 {
                                    let _ = done_tx.send((pass, index));
                                }
                            }
                        }
                        Ok(runs)
                    })
                    .unwrap_or_else(|error| {
                        Err(MeasureError::ThreadPanicked {
                            message: format!("cannot start a pool of {threads} threads: {error}"),
                        })
                    })
                })
            })
            .collect();
        drop(done_tx);
        for (pass, index) in done_rx {
            done(pass, index);
        }
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|panic| {
                    Err(MeasureError::ThreadPanicked {
                        message: panic_message(panic.as_ref()),
                    })
                })
            })
            .collect()
    });
    if let Some(error) = failure.into_inner() {
        return Err(error);
    }
    let mut results = results.into_iter();
    let first = results.next().unwrap_or(Ok(Vec::new()))?;
    for other in results {
        other?;
    }
    Ok(first)
}

/// One run of a part on `bench`, its panics and errors turned into [`MeasureError`]s.
fn measure_run<B: ContextParallelBackend>(
    bench: &mut PartBench<B>,
    part: ProfiledPart,
    batch: usize,
    size: usize,
    meter: &dyn MemoryMeter,
    start_together: &dyn Fn(),
) -> Result<Run, MeasureError> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        bench.run(part, batch, size, meter, start_together)
    }))
    .map_err(|panic| MeasureError::Panicked {
        part,
        size,
        message: panic_message(panic.as_ref()),
    })
    .and_then(|run| run.map_err(|source| MeasureError::Attention { size, source }))
}

/// The run, or `None` after recording its error as the profile's failure and releasing every
/// copy waiting in `lockstep`.
fn record(
    measured: Result<Run, MeasureError>,
    failed: &AtomicBool,
    failure: &OnceLock<MeasureError>,
    lockstep: &Lockstep,
) -> Option<Run> {
    match measured {
        Ok(run) => Some(run),
        Err(error) => {
            failed.store(true, Ordering::Release);
            failure.get_or_init(|| error);
            lockstep.break_up();
            None
        }
    }
}

/// What a rank of the parallel runtime holds beyond the memory model's terms: one real
/// training step of a one-layer model on one rank, one sequence of the smallest row count,
/// measured peak minus the model's prediction from `table` (at least 0).
fn runtime_overhead<B: ContextParallelBackend>(
    table: &ProfileTable,
    shape: &ModelShape,
    device: &B::Device,
    meter: Arc<dyn MemoryMeter>,
    options: &ProfilerOptions,
) -> Result<u64, MeasureError> {
    let seq_len = options.ladder.row_points().first().copied().unwrap_or(64);
    let one_layer = ModelShape {
        layers: 1,
        ..shape.clone()
    };
    let workload = Workload {
        seq_len,
        sequences_per_step: 1,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let mesh = Mesh {
        pp: 1,
        cp: 1,
        dp: 1,
        micro_batches: 1,
    };
    let fitted = FittedProfile::fit(table, &FitOptions::default())
        .map_err(|error| MeasureError::Overhead(error.to_string()))?;
    let predicted = MemoryModel::new(&one_layer, &workload, &fitted, &mesh)
        .stage(0, 1)
        .total();
    let plan = Plan {
        pp: 1,
        cp: 1,
        dp: 1,
        micro_batches: 1,
        stage_layers: vec![1],
        predicted_step_seconds: 0.0,
        predicted_peak_bytes_per_device: predicted,
        bottleneck: String::new(),
        measured_step_seconds: None,
        measured_peak_bytes_per_device: None,
    };
    let validation = ValidationOptions {
        warmup_steps: 1,
        steps: 2,
        measured_seconds: 0.0,
        max_steps: 2,
        rounds: 1,
        seed: options.seed,
        timeout_seconds: 600,
    };
    let report = validate_plans::<B>(
        &one_layer,
        &workload,
        &[plan],
        device,
        meter,
        &validation,
        &mut |_| {},
    )
    .map_err(|error| MeasureError::Overhead(error.to_string()))?;
    let measured = report
        .plans
        .first()
        .and_then(|p| p.plan.measured_peak_bytes_per_device)
        .unwrap_or(predicted);
    Ok(measured.saturating_sub(predicted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn lockstep_lets_no_copy_pass_before_all_arrive() {
        let lockstep = Lockstep::new(3);
        let passed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                lockstep.wait();
                passed.store(true, Ordering::SeqCst);
                // second meeting
                lockstep.wait();
            });
            scope.spawn(|| {
                lockstep.wait();
                lockstep.wait();
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!passed.load(Ordering::SeqCst), "passed with 2 of 3 copies");
            lockstep.wait();
            lockstep.wait();
        });
        assert!(passed.load(Ordering::SeqCst));
    }

    #[test]
    fn a_broken_lockstep_releases_every_waiter() {
        let lockstep = Lockstep::new(3);
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| lockstep.wait());
            scope.spawn(|| lockstep.wait());
            std::thread::sleep(Duration::from_millis(20));
            lockstep.break_up();
        });
        // and every later meeting passes at once
        lockstep.wait();
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

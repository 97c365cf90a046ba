//! The profiler's measuring loop: every point of a ladder, pass after pass, on copies in
//! lockstep ([`measure_jobs`]), and the solo ratios of its runs ([`solo_ratios`]).

use super::lockstep::Lockstep;
use super::options::{MeasureError, ProfilerOptions};
use super::parts::{PartBench, Run};
use megagraph_parallel::threads::{default_threads_per_rank, panic_message, run_in_pool};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_planner::{ModelShape, PassRatios, ProfiledPart, SoloRatios};
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The median of `values` (sorted in place); 0 when empty.
pub(super) fn median(values: &mut [f64]) -> f64 {
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

/// The [`SoloRatios`] of timed runs `runs` of `jobs` on `copies` copies: per part and pass,
/// the median over the part's points of the point's median time alone over its median time
/// with every copy computing. `None` with one copy, or when a part has no point measured both
/// ways with positive times.
pub(super) fn solo_ratios(
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
pub(super) struct JobRuns {
    /// Forward seconds of every timed run.
    pub(super) forward: Vec<f64>,
    /// Backward seconds of every timed run.
    pub(super) backward: Vec<f64>,
    /// Forward seconds of every timed run alone (the other copies waiting).
    pub(super) solo_forward: Vec<f64>,
    /// Backward seconds of every timed run alone.
    pub(super) solo_backward: Vec<f64>,
    /// The last timed run (its memory).
    pub(super) last: Option<Run>,
}

/// Runs `jobs` pass after pass (`options.warmup` untimed passes, then `options.repeats` timed
/// ones) on `options.concurrency` copies in lockstep, and returns the first copy's timed runs
/// of each job. With more than one copy, every timed run is followed by one of the first copy
/// alone while the others wait. `done(pass, job)` is called after each of its runs.
pub(super) fn measure_jobs<B: ContextParallelBackend>(
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
                            for (index, &job) in jobs.iter().enumerate() {
                                if failed.load(Ordering::Acquire) {
                                    break 'passes;
                                }
                                let timed = pass >= options.warmup;
                                // every copy runs every job, meeting the others before each pass
                                let together = measure_run(&mut bench, job, meter, &|| lockstep.wait());
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
                                        let alone = measure_run(&mut bench, job, meter, &|| {});
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

/// One run on `bench` of a job (a part, its batch and size; see [`PartBench::run`]), its
/// panics and errors turned into [`MeasureError`]s.
fn measure_run<B: ContextParallelBackend>(
    bench: &mut PartBench<B>,
    (part, batch, size): (ProfiledPart, usize, usize),
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

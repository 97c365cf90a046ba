//! A profile's points measured again in turns with other work: [`InTurnProfile`].

use super::measure::{JobRuns, measure_jobs, median, solo_ratios};
use super::options::{MeasureError, ProfilerOptions};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_planner::ModelShape;
use megagraph_planner::{ProfileTable, ProfiledPart};
use std::time::Instant;

/// The points of a measured [`ProfileTable`] measured again, the same way (copies in lockstep,
/// pass after pass), in sessions that take turns with other work.
///
/// `plan --validate` measures a session before the validation and one after each of its rounds:
/// [`table`](Self::table) is then the profile of the machine as it ran while the plans were
/// measured, and the predictions it gives face the measured step times at the same machine
/// speed. On a shared machine whose speed drifts over minutes, comparing those isolates the cost
/// model's own error from the drift since the profile was taken, which
/// [`drift`](Self::drift) reports.
#[derive(Clone, Debug)]
pub struct InTurnProfile {
    base: ProfileTable,
    /// Every point of `base`: `(part, batch, size)`, in table order.
    points: Vec<(ProfiledPart, usize, usize)>,
    /// Timed runs of every point over all sessions.
    runs: Vec<JobRuns>,
    passes: usize,
    /// Copies of the last session.
    copies: usize,
    /// Every session: when it ran, and its own time of every point.
    timeline: Vec<Session>,
}

/// One session of an [`InTurnProfile`]: when it ran, and every point's time in it.
#[derive(Clone, Debug)]
struct Session {
    started: Instant,
    ended: Instant,
    /// Median forward plus median backward seconds of every point in this session (0 for a
    /// point without runs), in table order.
    seconds: Vec<f64>,
}

impl InTurnProfile {
    /// Starts with no session: [`table`](Self::table) is `base` until one is measured.
    pub fn new(base: ProfileTable) -> Self {
        let points: Vec<_> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| {
                base.samples(part)
                    .iter()
                    .map(move |sample| (part, sample.batch, sample.size))
            })
            .collect();
        Self {
            runs: vec![JobRuns::default(); points.len()],
            base,
            points,
            passes: 0,
            copies: 1,
            timeline: Vec::new(),
        }
    }

    /// The profile measured again.
    pub fn base(&self) -> &ProfileTable {
        &self.base
    }

    /// Measures one session: `options.warmup` untimed and `options.repeats` timed passes over
    /// every point of the profile, on `options.concurrency` copies in lockstep, each timed run
    /// followed by one of the first copy alone as the profiler does (`options.ladder` is not
    /// used: the points are the profile's).
    ///
    /// # Errors
    ///
    /// As [`measure_profile`](super::measure_profile): an invalid shape or option, or a failed
    /// measurement.
    pub fn measure<B: ContextParallelBackend>(
        &mut self,
        shape: &ModelShape,
        device: &B::Device,
        meter: &dyn MemoryMeter,
        options: &ProfilerOptions,
    ) -> Result<(), MeasureError> {
        shape.validate()?;
        options.check()?;
        let started = Instant::now();
        let session =
            measure_jobs::<B>(shape, device, meter, options, &self.points, &mut |_, _| {})?;
        let ended = Instant::now();
        let seconds = session.iter().map(point_seconds).collect();
        self.timeline.push(Session {
            started,
            ended,
            seconds,
        });
        for (runs, new) in self.runs.iter_mut().zip(session) {
            runs.forward.extend(new.forward);
            runs.backward.extend(new.backward);
            runs.solo_forward.extend(new.solo_forward);
            runs.solo_backward.extend(new.solo_backward);
        }
        self.copies = options.concurrency;
        self.passes += options.repeats;
        Ok(())
    }

    /// Sessions measured so far.
    pub fn sessions(&self) -> usize {
        self.timeline.len()
    }

    /// Timed passes over the points so far, all sessions together.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// The base profile with every point's forward and backward seconds replaced by the median
    /// of its runs over all sessions (points without runs keep the base's; the memory columns
    /// are always the base's: they do not drift), and the solo ratios by the sessions' (when
    /// they ran more than one copy).
    pub fn table(&self) -> ProfileTable {
        let mut table = self.base.clone();
        if let Some(solo) = solo_ratios(self.copies, &self.points, &self.runs) {
            table.solo = Some(solo);
        }
        let mut runs = self.runs.iter();
        for part in ProfiledPart::ALL {
            for sample in table.samples_mut(part) {
                let Some(runs) = runs.next() else { continue };
                if !runs.forward.is_empty() {
                    sample.forward_seconds = median(&mut runs.forward.clone());
                    sample.backward_seconds = median(&mut runs.backward.clone());
                }
            }
        }
        table
    }

    /// Every session's middle instant, in the order measured.
    pub fn session_instants(&self) -> Vec<Instant> {
        self.timeline
            .iter()
            .map(|session| session.started + (session.ended - session.started) / 2)
            .collect()
    }

    /// Every session's time factor, in the order measured: the median over the points of their time
    /// (forward plus backward) in that session over their time in [`table`](Self::table), the
    /// sessions together. Above 1 when the machine ran slower in that session than over all.
    pub fn session_time_factors(&self) -> Vec<f64> {
        let all: Vec<f64> = self.runs.iter().map(point_seconds).collect();
        self.timeline
            .iter()
            .map(|session| {
                let mut ratios: Vec<f64> = session
                    .seconds
                    .iter()
                    .zip(&all)
                    .filter(|&(&now, &all)| now > 0.0 && all > 0.0)
                    .map(|(now, all)| now / all)
                    .collect();
                if ratios.is_empty() {
                    1.0
                } else {
                    median(&mut ratios)
                }
            })
            .collect()
    }

    /// Median over the points of their time (forward plus backward) in [`table`](Self::table)
    /// over the base profile's: above 1 when the machine ran slower during the sessions than
    /// when it was profiled. `None` before the first session.
    pub fn drift(&self) -> Option<f64> {
        if self.timeline.is_empty() {
            return None;
        }
        let table = self.table();
        let mut ratios: Vec<f64> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| self.base.samples(part).iter().zip(table.samples(part)))
            .filter_map(|(base, now)| {
                let before = base.forward_seconds + base.backward_seconds;
                (before > 0.0).then(|| (now.forward_seconds + now.backward_seconds) / before)
            })
            .collect();
        (!ratios.is_empty()).then(|| median(&mut ratios))
    }
}

/// Median forward plus median backward seconds of `runs` (0 without runs).
fn point_seconds(runs: &JobRuns) -> f64 {
    if runs.forward.is_empty() {
        return 0.0;
    }
    median(&mut runs.forward.clone()) + median(&mut runs.backward.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_planner::ComputeHints;
    use megagraph_planner::{ProfileLadder, analytic_profile};

    /// A session of a second, now, with these times of the points.
    fn session(seconds: Vec<f64>) -> Session {
        let started = Instant::now();
        Session {
            started,
            ended: started + std::time::Duration::from_secs(1),
            seconds,
        }
    }

    fn base() -> ProfileTable {
        let hints = ComputeHints {
            peak_flops: 1e11,
            memory_bandwidth_bytes_per_second: 1e10,
            efficiency: 0.5,
            kernel_launch_seconds: 1e-5,
        };
        analytic_profile(
            &hints,
            "test",
            &ModelShape::paper(),
            4,
            &ProfileLadder::default(),
        )
        .unwrap()
    }

    #[test]
    fn the_table_takes_every_points_median_and_the_drift_the_median_ratio() {
        let base = base();
        let mut in_turn = InTurnProfile::new(base.clone());
        assert_eq!(in_turn.table(), base);
        assert_eq!(in_turn.drift(), None);
        let points = in_turn.points.len();
        assert_eq!(
            points,
            ProfiledPart::ALL
                .iter()
                .map(|&p| base.samples(p).len())
                .sum::<usize>()
        );
        // sessions of three runs per point at 1.4, 2 and 1.5 times the profile's time; the
        // first point was measured 3 times slower, the last not at all
        let samples: Vec<_> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| base.samples(part).iter().copied())
            .collect();
        for (index, (runs, sample)) in in_turn.runs.iter_mut().zip(&samples).enumerate() {
            let factors: &[f64] = match index {
                0 => &[3.0],
                i if i + 1 == points => &[],
                _ => &[1.4, 2.0, 1.5],
            };
            runs.forward = factors.iter().map(|f| f * sample.forward_seconds).collect();
            runs.backward = factors
                .iter()
                .map(|f| f * sample.backward_seconds)
                .collect();
        }
        in_turn.timeline = vec![session(vec![]); 3];
        let table = in_turn.table();
        let again: Vec<_> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| table.samples(part).iter().copied())
            .collect();
        for (index, (before, after)) in samples.iter().zip(&again).enumerate() {
            let factor = match index {
                0 => 3.0,
                i if i + 1 == points => 1.0,
                _ => 1.5,
            };
            assert!((after.forward_seconds - factor * before.forward_seconds).abs() < 1e-15);
            assert!((after.backward_seconds - factor * before.backward_seconds).abs() < 1e-15);
            assert_eq!(
                (after.saved_bytes, after.peak_bytes),
                (before.saved_bytes, before.peak_bytes)
            );
        }
        assert!((in_turn.drift().unwrap() - 1.5).abs() < 1e-12);
    }

    #[test]
    fn every_session_has_its_time_over_the_sessions_together() {
        let base = base();
        let mut in_turn = InTurnProfile::new(base.clone());
        assert!(in_turn.session_time_factors().is_empty());
        // a first session at the profile's time and a second at 1.5 times it: together the
        // median of both, 1.25 times; the last point was not measured in the second
        let samples: Vec<_> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| base.samples(part).iter().copied())
            .collect();
        let points = samples.len();
        let start = Instant::now();
        for (session, factor) in [1.0, 1.5].into_iter().enumerate() {
            let mut seconds = Vec::new();
            for (index, (runs, sample)) in in_turn.runs.iter_mut().zip(&samples).enumerate() {
                if session == 1 && index + 1 == points {
                    seconds.push(0.0);
                    continue;
                }
                runs.forward.push(factor * sample.forward_seconds);
                runs.backward.push(factor * sample.backward_seconds);
                seconds.push(factor * (sample.forward_seconds + sample.backward_seconds));
            }
            let started = start + std::time::Duration::from_secs(10 * session as u64);
            in_turn.timeline.push(Session {
                started,
                ended: started + std::time::Duration::from_secs(2),
                seconds,
            });
        }
        let factors = in_turn.session_time_factors();
        assert_eq!(factors.len(), 2);
        assert!((factors[0] - 0.8).abs() < 1e-12, "{factors:?}");
        assert!((factors[1] - 1.2).abs() < 1e-12, "{factors:?}");
        let instants = in_turn.session_instants();
        assert_eq!(instants[0] - start, std::time::Duration::from_secs(1));
        assert_eq!(instants[1] - start, std::time::Duration::from_secs(11));
    }

    #[test]
    fn sessions_of_two_copies_give_their_own_solo_ratios() {
        let base = base();
        assert_eq!(base.solo, None);
        let mut in_turn = InTurnProfile::new(base.clone());
        // every point twice together, and alone at 0.8 (forward) and 0.6 (backward) of that,
        // but the embedding's backward at 0.9
        let samples: Vec<_> = ProfiledPart::ALL
            .into_iter()
            .flat_map(|part| base.samples(part).iter().map(move |s| (part, *s)))
            .collect();
        for (runs, (part, sample)) in in_turn.runs.iter_mut().zip(&samples) {
            let backward_alone = if *part == ProfiledPart::Embedding {
                0.9
            } else {
                0.6
            };
            runs.forward = vec![sample.forward_seconds; 2];
            runs.backward = vec![sample.backward_seconds; 2];
            runs.solo_forward = vec![0.8 * sample.forward_seconds; 2];
            runs.solo_backward = vec![backward_alone * sample.backward_seconds; 2];
        }
        in_turn.timeline = vec![session(vec![])];
        // one copy: no ratios
        assert_eq!(in_turn.table().solo, None);
        in_turn.copies = 2;
        let solo = in_turn.table().solo.unwrap();
        assert_eq!(solo.copies, 2);
        for part in ProfiledPart::ALL {
            let ratios = solo.part(part);
            let backward = if part == ProfiledPart::Embedding {
                0.9
            } else {
                0.6
            };
            assert!((ratios.forward - 0.8).abs() < 1e-12, "{part:?} {ratios:?}");
            assert!(
                (ratios.backward - backward).abs() < 1e-12,
                "{part:?} {ratios:?}"
            );
        }
    }
}

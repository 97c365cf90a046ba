use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::temporal::csr::EventDirection;
use crate::temporal::events::EventStream;

/// A random stream with many equal timestamps and some self-loops.
fn random_stream(seed: u64, nodes: u32, events: usize, max_time: u32) -> EventStream {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut time: Vec<f64> = (0..events)
        .map(|_| f64::from(rng.random_range(0..max_time)))
        .collect();
    time.sort_by(f64::total_cmp);
    let src = (0..events).map(|_| rng.random_range(0..nodes)).collect();
    let dst = (0..events).map(|_| rng.random_range(0..nodes)).collect();
    EventStream::new(nodes as usize, src, dst, time, vec![0; events]).unwrap()
}

/// Brute force: `node`'s `(neighbour, event, time)` entries strictly before `t`, in event
/// order, both endpoints, self-loops once.
fn history(s: &EventStream, node: u32, t: f64) -> Vec<Entry> {
    let mut out = Vec::new();
    for e in 0..s.len() {
        let (a, b, te) = (s.src()[e], s.dst()[e], s.time()[e]);
        if te >= t {
            continue;
        }
        if a == node {
            out.push((b, e as u32, te));
        } else if b == node {
            out.push((a, e as u32, te));
        }
    }
    out
}

fn sampler(
    s: &EventStream,
    fanouts: &[usize],
    strategy: SamplingStrategy,
    seed: u64,
) -> TemporalSampler {
    let csr = TemporalCsr::new(s, EventDirection::Undirected);
    let config = SamplerConfig {
        fanouts: fanouts.to_vec(),
        strategy,
        seed,
    };
    TemporalSampler::new(csr, config).unwrap()
}

/// The batch of every event's source and destination at the event's time.
fn event_roots(s: &EventStream) -> (Vec<u32>, Vec<f64>) {
    let roots = s.src().iter().chain(s.dst()).copied().collect();
    let times = s.time().iter().chain(s.time()).copied().collect();
    (roots, times)
}

/// A sampled or brute-force entry: `(neighbour, event id, time)`.
type Entry = (u32, u32, f64);

/// Row `r` of a hop: its valid entries and its padding entries (mask false).
fn row(h: &SampledHop, r: usize) -> (Vec<Entry>, Vec<Entry>) {
    let f = h.fanout;
    let mut valid = Vec::new();
    let mut pad = Vec::new();
    for j in r * f..(r + 1) * f {
        let entry = (h.neighbors[j], h.event_ids[j], h.times[j]);
        if h.mask[j] {
            assert!(pad.is_empty(), "a valid entry after padding in row {r}");
            valid.push(entry);
        } else {
            pad.push(entry);
        }
    }
    (valid, pad)
}

#[test]
fn recent_matches_brute_force_over_two_hops() {
    for seed in 0..4 {
        let s = random_stream(seed, 25, 300, 40);
        let (roots, times) = event_roots(&s);
        let hops = sampler(&s, &[5, 3], SamplingStrategy::Recent, 0)
            .sample(&roots, &times, 0)
            .unwrap();
        assert_eq!(hops.len(), 2);
        assert_eq!(hops[0].neighbors.len(), roots.len() * 5);
        assert_eq!(hops[1].roots, hops[0].neighbors);
        assert_eq!(hops[1].root_times, hops[0].times);
        assert_eq!(hops[1].neighbors.len(), roots.len() * 15);
        for hop in &hops {
            for r in 0..hop.roots.len() {
                let (valid, pad) = row(hop, r);
                let expected = if hop.root_mask[r] {
                    let all = history(&s, hop.roots[r], hop.root_times[r]);
                    all[all.len().saturating_sub(hop.fanout)..].to_vec()
                } else {
                    Vec::new()
                };
                assert_eq!(valid, expected, "seed {seed} root {r}");
                for p in pad {
                    assert_eq!(p, (0, 0, hop.root_times[r]));
                }
            }
        }
    }
}

#[test]
fn no_event_sees_itself_or_the_future() {
    for strategy in [SamplingStrategy::Recent, SamplingStrategy::Uniform] {
        for seed in 0..4 {
            // Times in 0..10 over 400 events: every timestamp is shared by many events.
            let s = random_stream(100 + seed, 30, 400, 10);
            let (roots, times) = event_roots(&s);
            let hops = sampler(&s, &[4, 4], strategy, seed)
                .sample(&roots, &times, seed)
                .unwrap();
            let events = s.len();
            for (r, &t) in times.iter().enumerate() {
                let own = (r % events) as u32;
                for j in r * 4..(r + 1) * 4 {
                    if !hops[0].mask[j] {
                        continue;
                    }
                    let e = hops[0].event_ids[j];
                    assert_ne!(e, own, "{strategy:?}: event {own} sees itself");
                    assert!(s.time()[e as usize] < t, "{strategy:?}: look-ahead");
                    assert_eq!(hops[0].times[j], s.time()[e as usize]);
                    for k in j * 4..(j + 1) * 4 {
                        if hops[1].mask[k] {
                            let e2 = hops[1].event_ids[k] as usize;
                            assert!(s.time()[e2] < hops[0].times[j], "hop 2 look-ahead");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn uniform_samples_distinct_entries_of_the_history() {
    let s = random_stream(7, 12, 500, 60);
    let (roots, times) = event_roots(&s);
    let hops = sampler(&s, &[6], SamplingStrategy::Uniform, 3)
        .sample(&roots, &times, 9)
        .unwrap();
    let mut truncated = 0;
    for r in 0..roots.len() {
        let all = history(&s, roots[r], times[r]);
        let (valid, _) = row(&hops[0], r);
        assert_eq!(valid.len(), all.len().min(6));
        truncated += usize::from(all.len() > 6);
        assert!(valid.iter().all(|v| all.contains(v)), "outside the history");
        assert!(
            valid.windows(2).all(|w| w[0].1 < w[1].1),
            "not in time order or repeated"
        );
    }
    assert!(
        truncated > 100,
        "the test needs roots with more history than the fanout"
    );
}

#[test]
fn uniform_is_deterministic_per_seed_and_batch_whatever_the_threads() {
    let s = random_stream(8, 20, 600, 100);
    let (roots, times) = event_roots(&s);
    let sm = sampler(&s, &[5, 2], SamplingStrategy::Uniform, 42);
    let a = sm.sample(&roots, &times, 1).unwrap();
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let four = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    assert_eq!(a, single.install(|| sm.sample(&roots, &times, 1).unwrap()));
    assert_eq!(a, four.install(|| sm.sample(&roots, &times, 1).unwrap()));
    assert_ne!(
        a[0].event_ids,
        sm.sample(&roots, &times, 2).unwrap()[0].event_ids
    );
    let other = sampler(&s, &[5, 2], SamplingStrategy::Uniform, 43);
    assert_ne!(
        a[0].event_ids,
        other.sample(&roots, &times, 1).unwrap()[0].event_ids
    );
}

#[test]
fn uniform_picks_every_candidate_equally_often() {
    // Node 0 has 20 interactions before time 100; sample 5 of them in 4,000 batches.
    let n = 20;
    let stream = EventStream::new(
        n + 1,
        vec![0; n],
        (1..=n as u32).collect(),
        (0..n).map(|t| t as f64).collect(),
        vec![0; n],
    )
    .unwrap();
    let sm = sampler(&stream, &[5], SamplingStrategy::Uniform, 5);
    let mut counts = vec![0usize; n];
    for batch in 0..4_000 {
        let hop = &sm.sample(&[0], &[100.0], batch).unwrap()[0];
        for &e in &hop.event_ids {
            counts[e as usize] += 1;
        }
    }
    // Expected 1,000 each (5 of 20 per batch); sd ~ 27.
    for (e, &c) in counts.iter().enumerate() {
        assert!((850..=1_150).contains(&c), "event {e}: {c}");
    }
}

#[test]
fn invalid_inputs_are_typed_errors() {
    let s = random_stream(9, 5, 20, 5);
    let csr = || TemporalCsr::new(&s, EventDirection::Undirected);
    for fanouts in [vec![], vec![3, 0]] {
        let config = SamplerConfig {
            fanouts,
            ..SamplerConfig::default()
        };
        assert!(matches!(
            TemporalSampler::new(csr(), config),
            Err(TemporalError::InvalidConfig { .. })
        ));
    }
    let sm = TemporalSampler::new(csr(), SamplerConfig::default()).unwrap();
    assert!(matches!(
        sm.sample(&[0, 1], &[1.0], 0),
        Err(TemporalError::ColumnLength { .. })
    ));
    assert!(matches!(
        sm.sample(&[0, 5], &[1.0, 1.0], 0),
        Err(TemporalError::NodeOutOfRange {
            event: 1,
            node: 5,
            ..
        })
    ));
    assert!(matches!(
        sm.sample(&[0], &[f64::NAN], 0),
        Err(TemporalError::NonFiniteTime { event: 0, .. })
    ));
    assert!(sm.sample(&[], &[], 0).unwrap()[0].neighbors.is_empty());
}

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

fn config(repeat_prob: f64, community_prob: f64, seed: u64) -> InteractionConfig {
    InteractionConfig {
        num_users: 200,
        num_items: 100,
        num_communities: 4,
        num_events: 20_000,
        repeat_prob,
        community_prob,
        drift_prob: 0.02,
        seed,
        ..InteractionConfig::default()
    }
}

#[test]
fn deterministic_for_a_seed() {
    let a = config(0.5, 0.8, 7).generate().unwrap();
    let b = config(0.5, 0.8, 7).generate().unwrap();
    assert_eq!(a, b);
    let c = config(0.5, 0.8, 8).generate().unwrap();
    assert_ne!(a.events.dst(), c.events.dst());
}

#[test]
fn default_is_the_documented_size() {
    let s = InteractionConfig::default().generate().unwrap();
    assert_eq!((s.events.len(), s.events.num_nodes()), (60_000, 1_500));
    assert_eq!(s.item_community.len(), 500);
    assert!(s.item_community.iter().all(|&c| c < 8));
}

#[test]
fn times_increase_and_ids_are_bipartite() {
    let cfg = InteractionConfig::small();
    let s = cfg.generate().unwrap();
    let e = &s.events;
    assert_eq!(e.len(), cfg.num_events);
    assert_eq!(e.num_nodes(), cfg.num_users + cfg.num_items);
    assert_eq!(e.bipartite(), Some(true));
    assert!(e.time().windows(2).all(|w| w[0] < w[1]));
    assert!(e.src().iter().all(|&u| (u as usize) < cfg.num_users));
    assert!(e.dst().iter().all(|&i| (i as usize) >= cfg.num_users));
    // Mean gap 1: the last time is about num_events (5 sigma of a sum of exponentials).
    let last = *e.time().last().unwrap();
    let n = cfg.num_events as f64;
    assert!((last - n).abs() < 5.0 * n.sqrt(), "{last}");
}

/// Replays the per-user recent windows: (events with history, of which drawn as repeats, of
/// which the item is in the window, repeats whose item is not in the window).
fn replay(cfg: &InteractionConfig, s: &SyntheticInteractions) -> (usize, usize, usize, usize) {
    let mut recent = vec![VecDeque::new(); cfg.num_users];
    let (mut with_history, mut repeats, mut in_window, mut bad) = (0, 0, 0, 0);
    for (e, (&u, &d)) in s.events.src().iter().zip(s.events.dst()).enumerate() {
        let item = d - cfg.num_users as u32;
        let w: &mut VecDeque<u32> = &mut recent[u as usize];
        if !w.is_empty() {
            with_history += 1;
            repeats += usize::from(s.repeat[e]);
            in_window += usize::from(w.contains(&item));
        }
        bad += usize::from(s.repeat[e] && !w.contains(&item));
        w.retain(|&i| i != item);
        w.push_front(item);
        w.truncate(cfg.recent_window);
    }
    (with_history, repeats, in_window, bad)
}

#[test]
fn repeat_rate_is_as_configured() {
    for p in [0.2, 0.5, 0.8] {
        let cfg = config(p, 0.8, 1);
        let s = cfg.generate().unwrap();
        let (with_history, repeats, in_window, bad) = replay(&cfg, &s);
        assert_eq!(bad, 0, "a repeat outside the recent window");
        let rate = repeats as f64 / with_history as f64;
        assert!((rate - p).abs() < 0.02, "repeat_prob {p}: drawn {rate}");
        // Fresh draws can also land in the window, never fewer hits than repeats.
        let hit = in_window as f64 / with_history as f64;
        assert!(hit >= rate && hit < rate + (1.0 - p) * 0.5, "{p}: {hit}");
    }
}

#[test]
fn community_rate_is_as_configured() {
    for q in [0.3, 0.9] {
        let cfg = config(0.3, q, 2);
        let s = cfg.generate().unwrap();
        let (mut fresh, mut inside) = (0usize, 0usize);
        for (e, &d) in s.events.dst().iter().enumerate() {
            if !s.repeat[e] {
                fresh += 1;
                let item = d as usize - cfg.num_users;
                inside += usize::from(s.item_community[item] == s.user_community[e]);
            }
        }
        let expected = q + (1.0 - q) / cfg.num_communities as f64;
        let rate = inside as f64 / fresh as f64;
        assert!(
            (rate - expected).abs() < 0.02,
            "community_prob {q}: {rate} vs {expected}"
        );
    }
}

#[test]
fn communities_drift_at_labelled_events() {
    let cfg = config(0.5, 0.8, 3);
    let s = cfg.generate().unwrap();
    let mut last: Vec<Option<u32>> = vec![None; cfg.num_users];
    for (e, &u) in s.events.src().iter().enumerate() {
        let now = s.user_community[e];
        if let Some(before) = last[u as usize] {
            assert_eq!(now != before, s.events.label()[e] == 1, "event {e}");
        }
        last[u as usize] = Some(now);
    }
    let rate = s.events.positive_labels() as f64 / cfg.num_events as f64;
    assert!((rate - cfg.drift_prob).abs() < 0.005, "{rate}");
}

#[test]
fn invalid_configs_name_the_field() {
    let cases: [(&str, InteractionConfig); 6] = [
        (
            "num_users",
            InteractionConfig {
                num_users: 0,
                ..InteractionConfig::small()
            },
        ),
        (
            "num_items",
            InteractionConfig {
                num_items: 3,
                ..InteractionConfig::small()
            },
        ),
        (
            "repeat_prob",
            InteractionConfig {
                repeat_prob: 1.5,
                ..InteractionConfig::small()
            },
        ),
        (
            "drift_prob",
            InteractionConfig {
                drift_prob: f64::NAN,
                ..InteractionConfig::small()
            },
        ),
        (
            "mean_gap",
            InteractionConfig {
                mean_gap: 0.0,
                ..InteractionConfig::small()
            },
        ),
        (
            "recent_window",
            InteractionConfig {
                recent_window: 0,
                ..InteractionConfig::small()
            },
        ),
    ];
    for (want, cfg) in cases {
        match cfg.generate() {
            Err(TemporalError::InvalidConfig { field, .. }) => assert_eq!(field, want),
            other => panic!("{want}: unexpected {other:?}"),
        }
    }
}

/// Pairwise AUC of `score(event, item)` for the true item against one random item per event,
/// over events after the first `warmup`.
fn pairwise_auc(
    s: &SyntheticInteractions,
    cfg: &InteractionConfig,
    warmup: usize,
    mut score: impl FnMut(usize, u32) -> f64,
    mut observe: impl FnMut(usize),
) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let (mut wins, mut n) = (0.0, 0usize);
    for e in 0..s.events.len() {
        if e >= warmup {
            let positive = s.events.dst()[e] - cfg.num_users as u32;
            let negative = rng.random_range(0..cfg.num_items as u32);
            let (p, q) = (score(e, positive), score(e, negative));
            wins += if p > q {
                1.0
            } else if p == q {
                0.5
            } else {
                0.0
            };
            n += 1;
        }
        observe(e);
    }
    wins / n as f64
}

#[test]
fn per_user_memory_predicts_links_better_than_popularity() {
    let cfg = InteractionConfig::default();
    let s = cfg.generate().unwrap();
    let (src, dst) = (s.events.src(), s.events.dst());
    let item = |e: usize| dst[e] as usize - cfg.num_users;
    // Memoryless: how often each item was used so far.
    let popularity = std::cell::RefCell::new(vec![0.0f64; cfg.num_items]);
    let auc_popularity = pairwise_auc(
        &s,
        &cfg,
        6_000,
        |_, i| popularity.borrow()[i as usize],
        |e| popularity.borrow_mut()[item(e)] += 1.0,
    );
    // Per-user memory: when the user last used the item.
    let last_use = std::cell::RefCell::new(std::collections::HashMap::<(u32, u32), f64>::new());
    let auc_memory = pairwise_auc(
        &s,
        &cfg,
        6_000,
        |e, i| last_use.borrow().get(&(src[e], i)).copied().unwrap_or(-1.0),
        |e| {
            last_use
                .borrow_mut()
                .insert((src[e], item(e) as u32), e as f64);
        },
    );
    eprintln!("pairwise AUC: popularity {auc_popularity:.3}, per-user memory {auc_memory:.3}");
    assert!(auc_popularity < 0.6, "popularity AUC {auc_popularity}");
    assert!(
        auc_memory > auc_popularity + 0.15,
        "memory {auc_memory} vs {auc_popularity}"
    );
}

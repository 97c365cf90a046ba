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
            if !s.repeat[e] && !s.trending[e] {
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
    let cases: [(&str, InteractionConfig); 8] = [
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
            "trend_size",
            InteractionConfig {
                trend_size: 0,
                ..InteractionConfig::small()
            },
        ),
        (
            "trend_turnover",
            InteractionConfig {
                trend_turnover: -0.1,
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

#[test]
fn trending_items_take_their_share_and_turn_over() {
    let cfg = config(0.3, 0.8, 4);
    let s = cfg.generate().unwrap();
    let n = s.events.len();
    let fresh = s.repeat.iter().filter(|&&r| !r).count();
    let trending = s.trending.iter().filter(|&&t| t).count();
    assert!(s.repeat.iter().zip(&s.trending).all(|(&r, &t)| !(r && t)));
    let rate = trending as f64 / fresh as f64;
    assert!(
        (rate - cfg.trend_prob).abs() < 0.02,
        "trend_prob {}: {rate}",
        cfg.trend_prob
    );
    // The trending draws of 500 events (a slot's mean life) concentrate on few items, and the
    // trending items of the first 500 events are gone by the last 500 (a fresh set of 10 of
    // the 100 items shares one with them on average).
    let items = |range: std::ops::Range<usize>| {
        let mut count = std::collections::HashMap::<u32, usize>::new();
        for e in range.filter(|&e| s.trending[e]) {
            *count.entry(s.events.dst()[e]).or_default() += 1;
        }
        count
    };
    let (first, last) = (items(0..500), items(n - 500..n));
    let top = |count: &std::collections::HashMap<u32, usize>| {
        let mut c: Vec<(usize, u32)> = count.iter().map(|(&i, &k)| (k, i)).collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        c.into_iter()
            .take(cfg.trend_size)
            .map(|(_, i)| i)
            .collect::<Vec<_>>()
    };
    let share = |count: &std::collections::HashMap<u32, usize>| {
        let total: usize = count.values().sum();
        let mut k: Vec<usize> = count.values().copied().collect();
        k.sort_unstable_by(|a, b| b.cmp(a));
        k.iter().take(cfg.trend_size).sum::<usize>() as f64 / total as f64
    };
    assert!(
        share(&first) > 0.6 && share(&last) > 0.6,
        "{} {}",
        share(&first),
        share(&last)
    );
    let (a, b) = (top(&first), top(&last));
    let kept = a.iter().filter(|i| b.contains(i)).count();
    assert!(
        kept <= 4,
        "{kept} of the first trending items still trend at the end"
    );
}

/// Pairwise AUC over the test part (the last 15%) of `score(event, item)` for the true item
/// against one uniformly drawn item per event; `observe(event)` after each event.
fn test_auc(
    s: &SyntheticInteractions,
    cfg: &InteractionConfig,
    mut score: impl FnMut(usize, u32) -> f64,
    mut observe: impl FnMut(usize),
) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let start = s.events.len() * 85 / 100;
    let (mut wins, mut n) = (0.0, 0usize);
    for e in 0..s.events.len() {
        if e >= start {
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
fn recency_predicts_test_links_that_a_static_model_cannot() {
    for seed in [0, 1] {
        let cfg = InteractionConfig {
            seed,
            ..InteractionConfig::default()
        };
        let s = cfg.generate().unwrap();
        let (src, dst) = (s.events.src(), s.events.dst());
        let item = |e: usize| dst[e] - cfg.num_users as u32;
        // Static: each user's item frequencies over the training part (the first 70%),
        // smoothed towards the items' overall frequencies: what a per-node model can fit.
        let train = s.events.len() * 70 / 100;
        let mut pair = std::collections::HashMap::<(u32, u32), f64>::new();
        let (mut by_item, mut by_user) = (vec![0.0f64; cfg.num_items], vec![0.0f64; cfg.num_users]);
        for e in 0..train {
            *pair.entry((src[e], item(e))).or_default() += 1.0;
            by_item[item(e) as usize] += 1.0;
            by_user[src[e] as usize] += 1.0;
        }
        let prior = |i: u32| (by_item[i as usize] + 1.0) / (train + cfg.num_items) as f64;
        let auc_static = test_auc(
            &s,
            &cfg,
            |e, i| {
                let seen = pair.get(&(src[e], i)).copied().unwrap_or(0.0);
                (seen + 5.0 * prior(i)) / (by_user[src[e] as usize] + 5.0)
            },
            |_| {},
        );
        // Memory: whether the item is among the user's recent ones, then how often anyone used
        // it in the last 100 events.
        let recent = std::cell::RefCell::new(vec![VecDeque::<u32>::new(); cfg.num_users]);
        let lately = std::cell::RefCell::new((VecDeque::<u32>::new(), vec![0.0f64; cfg.num_items]));
        let auc_memory = test_auc(
            &s,
            &cfg,
            |e, i| {
                let mine = recent.borrow()[src[e] as usize].contains(&i);
                1_000.0 * f64::from(u8::from(mine)) + lately.borrow().1[i as usize]
            },
            |e| {
                let w = &mut recent.borrow_mut()[src[e] as usize];
                w.retain(|&i| i != item(e));
                w.push_front(item(e));
                w.truncate(cfg.recent_window);
                let (window, count) = &mut *lately.borrow_mut();
                window.push_back(item(e));
                count[item(e) as usize] += 1.0;
                if window.len() > 100 {
                    if let Some(old) = window.pop_front() {
                        count[old as usize] -= 1.0;
                    }
                }
            },
        );
        eprintln!("seed {seed}: test AUC static {auc_static:.3}, memory {auc_memory:.3}");
        assert!(auc_static < 0.6, "static AUC {auc_static}");
        assert!(
            auc_memory > auc_static + 0.25,
            "memory {auc_memory} vs static {auc_static}"
        );
    }
}

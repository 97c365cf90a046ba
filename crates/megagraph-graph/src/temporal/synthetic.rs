//! [`InteractionConfig`]: the seeded synthetic user-item event stream, the built-in default
//! dataset of the temporal models.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::error::TemporalError;
use super::events::EventStream;

/// Configuration of a synthetic bipartite user-item stream in which recency carries what a
/// static model of the graph cannot know.
///
/// Users are nodes `0..num_users`, items nodes `num_users..num_users + num_items`. Items belong
/// to communities round-robin (item `i` to community `i % num_communities`); each user starts
/// in a uniformly drawn community. A global set of `trend_size` trending items starts uniformly
/// drawn. Each event:
///
/// 1. with probability `trend_turnover` replaces one uniformly chosen trending slot by a
///    uniformly drawn item (which may already trend; it then fills two slots): popularity
///    moves, every slot turning over about once per `trend_size / trend_turnover` events;
/// 2. picks a user uniformly and a time `previous + Exp(mean_gap)`;
/// 3. with probability `drift_prob` moves the user to another community, uniformly among the
///    others (the event's label is then 1, else 0): preferences drift;
/// 4. with probability `repeat_prob`, if the user has interacted before, picks uniformly among
///    the user's `recent_window` most recently used distinct items (a repeat: per-user sessions
///    that turn over as fresh items push old ones out); otherwise a fresh item: with
///    probability `trend_prob` uniform among the trending slots, else with probability
///    `community_prob` uniform among the items of the user's current community, else uniform
///    among all items.
///
/// What predicts an event's item is recent: the user's last few items, the items everyone used
/// lately, the community the user drifted to. Over a chronological split the trending items
/// and sessions of the test events are mostly new, so a static per-node model fitted on the
/// training events does little better than chance on them, while a model that keeps
/// per-node memory or reads recent neighbours does much better. The stream is a deterministic
/// function of the configuration (ChaCha8 seeded from `seed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InteractionConfig {
    /// Number of users (>= 1). Default: 1_000.
    pub num_users: usize,
    /// Number of items (>= `num_communities`). Default: 500.
    pub num_items: usize,
    /// Number of communities (>= 1). Default: 8.
    pub num_communities: usize,
    /// Number of events. Default: 60_000.
    pub num_events: usize,
    /// Probability that an event of a user with history repeats a recent item, in [0, 1].
    /// Default: 0.5.
    pub repeat_prob: f64,
    /// How many most recently used distinct items per user count as recent (>= 1). Default: 3.
    pub recent_window: usize,
    /// Probability that a fresh item is a trending one, in [0, 1]. Default: 0.5.
    pub trend_prob: f64,
    /// Number of trending slots (>= 1). Default: 10.
    pub trend_size: usize,
    /// Probability per event that one trending slot turns over, in [0, 1]. Default: 0.02 (a
    /// slot lasts about 500 events).
    pub trend_turnover: f64,
    /// Probability that a fresh item that is not trending comes from the user's current
    /// community, in [0, 1]. Default: 0.8.
    pub community_prob: f64,
    /// Probability per event that its user moves to another community, in [0, 1]. Default:
    /// 0.05 (a user moves about once every 20 of its events).
    pub drift_prob: f64,
    /// Mean time between consecutive events (> 0). Default: 1.0.
    pub mean_gap: f64,
    /// Random seed. Default: 0.
    pub seed: u64,
}

impl Default for InteractionConfig {
    fn default() -> Self {
        Self {
            num_users: 1_000,
            num_items: 500,
            num_communities: 8,
            num_events: 60_000,
            repeat_prob: 0.5,
            recent_window: 3,
            trend_prob: 0.5,
            trend_size: 10,
            trend_turnover: 0.02,
            community_prob: 0.8,
            drift_prob: 0.05,
            mean_gap: 1.0,
            seed: 0,
        }
    }
}

/// A generated stream with the generator's ground truth.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticInteractions {
    /// The events (bipartite; label 1 marks a user's community change at that event).
    pub events: EventStream,
    /// The user's community at each event (after any drift), `[events]`.
    pub user_community: Vec<u32>,
    /// Each item's community, `[num_items]` (item node `num_users + i` is item `i`).
    pub item_community: Vec<u32>,
    /// Whether each event was drawn as a repeat of a recent item, `[events]`.
    pub repeat: Vec<bool>,
    /// Whether each event was drawn from the trending items, `[events]`.
    pub trending: Vec<bool>,
}

impl InteractionConfig {
    /// A small configuration for tests: 60 users, 40 items, 4 communities, 4 trending slots,
    /// 3,000 events.
    pub fn small() -> InteractionConfig {
        InteractionConfig {
            num_users: 60,
            num_items: 40,
            num_communities: 4,
            trend_size: 4,
            num_events: 3_000,
            ..InteractionConfig::default()
        }
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] naming the first invalid field.
    pub fn validate(&self) -> Result<(), TemporalError> {
        if self.num_users == 0 {
            return Err(TemporalError::config("num_users", 0, "must be at least 1"));
        }
        if self.num_communities == 0 {
            return Err(TemporalError::config(
                "num_communities",
                0,
                "must be at least 1",
            ));
        }
        if self.num_items < self.num_communities {
            return Err(TemporalError::config(
                "num_items",
                self.num_items,
                "must be at least num_communities (every community needs an item)",
            ));
        }
        if self.recent_window == 0 {
            return Err(TemporalError::config(
                "recent_window",
                0,
                "must be at least 1",
            ));
        }
        if self.trend_size == 0 {
            return Err(TemporalError::config("trend_size", 0, "must be at least 1"));
        }
        let nodes = self.num_users.checked_add(self.num_items);
        if nodes.is_none_or(|n| u32::try_from(n).is_err()) {
            return Err(TemporalError::config(
                "num_users + num_items",
                format!("{} + {}", self.num_users, self.num_items),
                "must fit u32 node ids",
            ));
        }
        if u32::try_from(self.num_events).is_err() {
            return Err(TemporalError::config(
                "num_events",
                self.num_events,
                "must fit u32 event ids",
            ));
        }
        for (field, p) in [
            ("repeat_prob", self.repeat_prob),
            ("trend_prob", self.trend_prob),
            ("trend_turnover", self.trend_turnover),
            ("community_prob", self.community_prob),
            ("drift_prob", self.drift_prob),
        ] {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(TemporalError::config(field, p, "must be in [0, 1]"));
            }
        }
        if !(self.mean_gap.is_finite() && self.mean_gap > 0.0) {
            return Err(TemporalError::config(
                "mean_gap",
                self.mean_gap,
                "must be finite and > 0",
            ));
        }
        Ok(())
    }

    /// Generates the stream (see the type docs).
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] for an invalid configuration.
    pub fn generate(&self) -> Result<SyntheticInteractions, TemporalError> {
        self.validate()?;
        let c = self.num_communities;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let item_community: Vec<u32> = (0..self.num_items).map(|i| (i % c) as u32).collect();
        let mut community: Vec<u32> = (0..self.num_users)
            .map(|_| rng.random_range(0..c) as u32)
            .collect();
        let mut trend: Vec<u32> = (0..self.trend_size)
            .map(|_| rng.random_range(0..self.num_items) as u32)
            .collect();
        let mut recent: Vec<VecDeque<u32>> = vec![VecDeque::new(); self.num_users];
        let n = self.num_events;
        let (mut src, mut dst, mut time, mut label) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut user_community = Vec::with_capacity(n);
        let mut repeat = Vec::with_capacity(n);
        let mut trending = Vec::with_capacity(n);
        let mut t = 0.0f64;
        for _ in 0..n {
            if rng.random_bool(self.trend_turnover) {
                let slot = rng.random_range(0..self.trend_size);
                trend[slot] = rng.random_range(0..self.num_items) as u32;
            }
            let user = rng.random_range(0..self.num_users);
            t += -self.mean_gap * (1.0 - rng.random::<f64>()).ln();
            let drift = c > 1 && rng.random_bool(self.drift_prob);
            if drift {
                // Uniform among the other communities.
                let step = rng.random_range(1..c) as u32;
                community[user] = (community[user] + step) % c as u32;
            }
            let history = &mut recent[user];
            let is_repeat = !history.is_empty() && rng.random_bool(self.repeat_prob);
            let is_trending = !is_repeat && rng.random_bool(self.trend_prob);
            let item = if is_repeat {
                history[rng.random_range(0..history.len())]
            } else if is_trending {
                trend[rng.random_range(0..trend.len())]
            } else if rng.random_bool(self.community_prob) {
                // Items of community k are k, k + c, k + 2c, ...
                let k = community[user] as usize;
                let members = (self.num_items - k).div_ceil(c);
                (k + c * rng.random_range(0..members)) as u32
            } else {
                rng.random_range(0..self.num_items) as u32
            };
            if let Some(pos) = history.iter().position(|&i| i == item) {
                history.remove(pos);
            }
            history.push_front(item);
            history.truncate(self.recent_window);
            src.push(user as u32);
            dst.push((self.num_users + item as usize) as u32);
            time.push(t);
            label.push(u8::from(drift));
            user_community.push(community[user]);
            repeat.push(is_repeat);
            trending.push(is_trending);
        }
        let events = EventStream::new(self.num_users + self.num_items, src, dst, time, label)?
            .with_bipartite(Some(true));
        Ok(SyntheticInteractions {
            events,
            user_community,
            item_community,
            repeat,
            trending,
        })
    }
}

#[cfg(test)]
mod tests;

//! [`WindowShards`]: DepBloom's temporally bounded spatial partitioning of an event stream.
//!
//! The stream is cut into windows of `window` consecutive events. Within a window, every event
//! goes to one of `workers` shards, and every node the window touches is owned by one shard
//! (the one that holds most of its events in the window; ties to the lower shard). A worker
//! runs its shard's events in time order against the memory of the nodes it owns; an event
//! with an endpoint owned by another shard is a *cross-shard* event, whose memory has to be
//! reconciled at the window boundary. The fewer cross-shard events, the less the workers
//! synchronize.
//!
//! Two ways to shard a window ([`ShardStrategy`]):
//! - [`ShardStrategy::Sequential`] (the naive one): the window's events cut into `workers`
//!   consecutive runs of (nearly) equal length.
//! - [`ShardStrategy::Topology`] (DepBloom's): the window's event–node graph (the nodes it
//!   touches, an edge per interacting pair) is partitioned by the locality partitioner
//!   ([`SequenceStrategy::Locality`]) into [`CLUSTERS_PER_WORKER`] × `workers` clusters of
//!   equal node counts. Events are far from equally spread over nodes, so the clusters are then
//!   packed into `workers` shards by their event load, in breadth-first order over their links: each to the shard it has
//!   the most edges with among those it fits in (a tenth above an equal share), else to the
//!   least loaded shard. An event goes to its endpoints' shard when they share one, otherwise to the shard
//!   of the endpoint that holds fewer events so far.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::error::TemporalError;
use super::events::EventStream;
use crate::graph::{Graph, GraphOptions};
use crate::sequence::{SequenceStrategy, node_sequences};

/// How the events of one window are divided among workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardStrategy {
    /// Consecutive runs of events, one per worker (the naive split).
    Sequential,
    /// A locality partition of the window's event–node graph (DepBloom).
    Topology,
}

/// The shards of one window of events `[start, end)`.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowShard {
    /// First event of the window.
    pub start: usize,
    /// One past the last event of the window.
    pub end: usize,
    /// The shard of each event of the window, `[end - start]`.
    pub event_shard: Vec<u32>,
    /// The shard that owns each node the window touches.
    pub node_owner: HashMap<u32, u32>,
}

impl WindowShard {
    /// Whether the window's event `event` (a global event index in `[start, end)`) has an
    /// endpoint owned by a shard other than its own.
    pub fn is_cross_shard(&self, events: &EventStream, event: usize) -> bool {
        let shard = self.event_shard[event - self.start];
        [events.src()[event], events.dst()[event]]
            .iter()
            .any(|node| {
                self.node_owner
                    .get(node)
                    .is_some_and(|&owner| owner != shard)
            })
    }

    /// The number of the window's events that are cross-shard.
    pub fn cross_shard_events(&self, events: &EventStream) -> usize {
        (self.start..self.end)
            .filter(|&e| self.is_cross_shard(events, e))
            .count()
    }

    /// Events per shard, `[workers]`.
    pub fn shard_sizes(&self, workers: usize) -> Vec<usize> {
        let mut sizes = vec![0; workers];
        for &shard in &self.event_shard {
            sizes[shard as usize] += 1;
        }
        sizes
    }
}

/// An event stream cut into windows, each sharded over the same number of workers.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowShards {
    /// Number of workers (shards per window).
    pub workers: usize,
    /// Events per window (the last window may be shorter).
    pub window: usize,
    /// How the windows were sharded.
    pub strategy: ShardStrategy,
    /// The windows in time order.
    pub windows: Vec<WindowShard>,
}

/// The cross-shard event ratio of both strategies at one window size
/// ([`WindowShards::compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CrossShardRatio {
    /// Events per window.
    pub window: usize,
    /// Cross-shard events / events with [`ShardStrategy::Sequential`].
    pub sequential: f64,
    /// Cross-shard events / events with [`ShardStrategy::Topology`].
    pub topology: f64,
    /// Largest shard / mean shard size with [`ShardStrategy::Topology`], over all windows (1 =
    /// perfectly balanced).
    pub topology_imbalance: f64,
}

impl WindowShards {
    /// Shards the events `[0, events.len())` in windows of `window` events over `workers`
    /// workers. Deterministic in `seed` (the partitioner's seed; window `i` uses `seed + i`).
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] for `workers` or `window` of 0, or `workers` above
    /// `u32::MAX`.
    pub fn build(
        events: &EventStream,
        workers: usize,
        window: usize,
        strategy: ShardStrategy,
        seed: u64,
    ) -> Result<WindowShards, TemporalError> {
        if workers == 0 || u32::try_from(workers).is_err() {
            return Err(TemporalError::config(
                "workers",
                workers,
                "must be in 1..=u32::MAX",
            ));
        }
        if window == 0 {
            return Err(TemporalError::config(
                "window",
                window,
                "must be at least 1 event",
            ));
        }
        let windows = (0..events.len())
            .step_by(window)
            .enumerate()
            .map(|(i, start)| {
                let end = (start + window).min(events.len());
                let event_shard = match strategy {
                    ShardStrategy::Sequential => sequential_shards(end - start, workers),
                    ShardStrategy::Topology => {
                        topology_shards(events, start, end, workers, seed.wrapping_add(i as u64))
                    }
                };
                let node_owner = node_owners(events, start, &event_shard, workers);
                WindowShard {
                    start,
                    end,
                    event_shard,
                    node_owner,
                }
            })
            .collect();
        Ok(WindowShards {
            workers,
            window,
            strategy,
            windows,
        })
    }

    /// Cross-shard events over all windows.
    pub fn cross_shard_events(&self, events: &EventStream) -> usize {
        self.windows
            .iter()
            .map(|w| w.cross_shard_events(events))
            .sum()
    }

    /// Cross-shard events / events (0 for an empty stream).
    pub fn cross_shard_ratio(&self, events: &EventStream) -> f64 {
        let total: usize = self.windows.iter().map(|w| w.end - w.start).sum();
        if total == 0 {
            0.0
        } else {
            self.cross_shard_events(events) as f64 / total as f64
        }
    }

    /// Largest shard / mean shard size over all windows (1 = perfectly balanced; 1 for an
    /// empty stream).
    pub fn imbalance(&self) -> f64 {
        self.windows
            .iter()
            .filter(|w| w.end > w.start)
            .map(|w| {
                let sizes = w.shard_sizes(self.workers);
                let max = sizes.iter().copied().max().unwrap_or(0) as f64;
                max * self.workers as f64 / (w.end - w.start) as f64
            })
            .fold(1.0, f64::max)
    }

    /// The cross-shard event ratio of [`ShardStrategy::Sequential`] and
    /// [`ShardStrategy::Topology`] at each window size of `windows`, over `workers` workers.
    ///
    /// # Errors
    /// As [`WindowShards::build`].
    pub fn compare(
        events: &EventStream,
        workers: usize,
        windows: &[usize],
        seed: u64,
    ) -> Result<Vec<CrossShardRatio>, TemporalError> {
        windows
            .iter()
            .map(|&window| {
                let sequential =
                    WindowShards::build(events, workers, window, ShardStrategy::Sequential, seed)?;
                let topology =
                    WindowShards::build(events, workers, window, ShardStrategy::Topology, seed)?;
                Ok(CrossShardRatio {
                    window,
                    sequential: sequential.cross_shard_ratio(events),
                    topology: topology.cross_shard_ratio(events),
                    topology_imbalance: topology.imbalance(),
                })
            })
            .collect()
    }
}

/// `len` events cut into `workers` consecutive runs whose lengths differ by at most one.
fn sequential_shards(len: usize, workers: usize) -> Vec<u32> {
    (0..len)
        .map(|i| (i * workers / len.max(1)) as u32)
        .collect()
}

/// Locality clusters per worker of [`ShardStrategy::Topology`]: more, smaller clusters pack
/// into shards of more even event loads, at the price of a few more cut edges.
pub const CLUSTERS_PER_WORKER: usize = 4;

/// The shards of events `[start, end)` from a locality partition of their event–node graph.
fn topology_shards(
    events: &EventStream,
    start: usize,
    end: usize,
    workers: usize,
    seed: u64,
) -> Vec<u32> {
    let (src, dst) = (&events.src()[start..end], &events.dst()[start..end]);
    let mut local: HashMap<u32, u32> = HashMap::new();
    let mut local_id = |node: u32| {
        let next = local.len() as u32;
        *local.entry(node).or_insert(next)
    };
    let pairs: Vec<(u32, u32)> = src
        .iter()
        .zip(dst)
        .map(|(&s, &d)| (local_id(s), local_id(d)))
        .collect();
    let nodes = local.len();
    let clusters = match Graph::from_edges(nodes, &pairs, &GraphOptions::default()) {
        Ok(graph) if workers > 1 => {
            let cap = nodes.div_ceil(workers * CLUSTERS_PER_WORKER).max(1);
            node_sequences(&graph, cap, SequenceStrategy::Locality, seed)
        }
        // One worker, or (impossible: local ids are below `nodes`) a graph that does not build.
        _ => vec![(0..nodes as u32).collect()],
    };
    let mut cluster_of = vec![0usize; nodes];
    for (cluster, members) in clusters.iter().enumerate() {
        for &node in members {
            cluster_of[node as usize] = cluster;
        }
    }
    // Each event weighs 2 on its endpoints' clusters (1 each when they differ).
    let mut weight = vec![0usize; clusters.len()];
    for &(s, d) in &pairs {
        weight[cluster_of[s as usize]] += 1;
        weight[cluster_of[d as usize]] += 1;
    }
    // Edges between clusters, to keep linked clusters in one shard.
    let mut links: HashMap<(usize, usize), usize> = HashMap::new();
    for &(s, d) in &pairs {
        let (a, b) = (cluster_of[s as usize], cluster_of[d as usize]);
        if a != b {
            *links.entry((a, b)).or_default() += 1;
            *links.entry((b, a)).or_default() += 1;
        }
    }
    let mut neighbours: Vec<Vec<(usize, usize)>> = vec![Vec::new(); clusters.len()];
    for (&(a, b), &count) in &links {
        neighbours[a].push((b, count));
    }
    let cap = (2 * pairs.len()).div_ceil(workers) + (2 * pairs.len()).div_ceil(workers * 10);
    let order = linked_order(&weight, &mut neighbours);
    let mut packed = vec![0usize; workers];
    let mut shard_of_cluster: Vec<Option<u32>> = vec![None; clusters.len()];
    for cluster in order {
        let mut affinity = vec![0usize; workers];
        for &(other, count) in &neighbours[cluster] {
            if let Some(shard) = shard_of_cluster[other] {
                affinity[shard as usize] += count;
            }
        }
        let lightest = (0..workers).min_by_key(|&w| (packed[w], w)).unwrap_or(0);
        let shard = (0..workers)
            .filter(|&w| packed[w] + weight[cluster] <= cap && affinity[w] > 0)
            .max_by(|&a, &b| affinity[a].cmp(&affinity[b]).then(b.cmp(&a)))
            .unwrap_or(lightest);
        packed[shard] += weight[cluster];
        shard_of_cluster[cluster] = Some(shard as u32);
    }
    let shard_of_cluster: Vec<u32> = shard_of_cluster
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    let mut load = vec![0usize; workers];
    pairs
        .iter()
        .map(|&(s, d)| {
            let (ps, pd) = (
                shard_of_cluster[cluster_of[s as usize]],
                shard_of_cluster[cluster_of[d as usize]],
            );
            let shard = if load[pd as usize] < load[ps as usize] {
                pd
            } else {
                ps
            };
            load[shard as usize] += 1;
            shard
        })
        .collect()
}

/// The clusters in breadth-first order over their links (strongest link first), each
/// component started from its heaviest cluster, the heaviest components first: a cluster is
/// placed after the clusters it is linked to, so it can follow them into their shard.
fn linked_order(weight: &[usize], neighbours: &mut [Vec<(usize, usize)>]) -> Vec<usize> {
    for list in neighbours.iter_mut() {
        list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    let mut roots: Vec<usize> = (0..weight.len()).collect();
    roots.sort_by(|&a, &b| weight[b].cmp(&weight[a]).then(a.cmp(&b)));
    let mut seen = vec![false; weight.len()];
    let mut order = Vec::with_capacity(weight.len());
    for root in roots {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(cluster) = queue.pop_front() {
            order.push(cluster);
            for &(next, _) in &neighbours[cluster] {
                if !seen[next] {
                    seen[next] = true;
                    queue.push_back(next);
                }
            }
        }
    }
    order
}

/// The owner of each node touched by events `[start, start + event_shard.len())`: the shard
/// holding most of its events there (ties to the lower shard).
fn node_owners(
    events: &EventStream,
    start: usize,
    event_shard: &[u32],
    workers: usize,
) -> HashMap<u32, u32> {
    let mut counts: HashMap<u32, Vec<u32>> = HashMap::new();
    for (offset, &shard) in event_shard.iter().enumerate() {
        let e = start + offset;
        let (s, d) = (events.src()[e], events.dst()[e]);
        let endpoints: &[u32] = if s == d { &[s] } else { &[s, d] };
        for &node in endpoints {
            counts.entry(node).or_insert_with(|| vec![0; workers])[shard as usize] += 1;
        }
    }
    counts
        .into_iter()
        .map(|(node, per_shard)| {
            let owner = per_shard
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                .map_or(0, |(shard, _)| shard as u32);
            (node, owner)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::InteractionConfig;

    /// Two groups of nodes that only interact within their group, interleaved in time.
    fn two_groups(events: usize) -> EventStream {
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for i in 0..events as u32 {
            let group = i % 2;
            let a = group * 10 + (i / 2) % 10;
            let b = group * 10 + (i / 2 + 3) % 10;
            src.push(a);
            dst.push(b);
        }
        let time = (0..events).map(|i| i as f64).collect();
        EventStream::new(20, src, dst, time, vec![0; events]).expect("valid stream")
    }

    #[test]
    fn topology_separates_groups_that_sequential_cuts() {
        let events = two_groups(400);
        let topology =
            WindowShards::build(&events, 2, 100, ShardStrategy::Topology, 1).expect("valid");
        let sequential =
            WindowShards::build(&events, 2, 100, ShardStrategy::Sequential, 1).expect("valid");
        assert_eq!(topology.windows.len(), 4);
        // Clusters of ceil(20 / 8) = 3 nodes cannot tile 10-node groups exactly, so a cluster
        // may hold nodes of both groups: nearly all, not all, events stay inside one shard.
        let ratio = topology.cross_shard_ratio(&events);
        assert!(ratio < 0.02, "cross-shard ratio {ratio}");
        assert!(
            topology.imbalance() <= 1.1 + 1e-9,
            "equal groups, nearly equal shards: {}",
            topology.imbalance()
        );
        assert!(
            sequential.cross_shard_ratio(&events) > 0.3,
            "{}",
            sequential.cross_shard_ratio(&events)
        );
    }

    #[test]
    fn sequential_runs_are_consecutive_and_balanced() {
        let shards = sequential_shards(10, 3);
        assert_eq!(shards, vec![0, 0, 0, 0, 1, 1, 1, 2, 2, 2]);
        assert!(shards.windows(2).all(|p| p[0] <= p[1]));
    }

    #[test]
    fn every_event_and_node_has_a_shard_and_one_worker_has_no_cross_events() {
        let events = InteractionConfig {
            num_events: 3_000,
            ..Default::default()
        }
        .generate()
        .expect("valid")
        .events;
        let one = WindowShards::build(&events, 1, 500, ShardStrategy::Topology, 0).expect("valid");
        assert_eq!(one.cross_shard_events(&events), 0);
        let four = WindowShards::build(&events, 4, 700, ShardStrategy::Topology, 0).expect("valid");
        assert_eq!(
            four.windows
                .iter()
                .map(|w| w.event_shard.len())
                .sum::<usize>(),
            3_000
        );
        assert_eq!(
            four.windows.last().map(|w| w.end - w.start),
            Some(3_000 - 4 * 700)
        );
        for w in &four.windows {
            assert!(w.event_shard.iter().all(|&s| s < 4));
            for e in w.start..w.end {
                assert!(
                    w.node_owner.contains_key(&events.src()[e])
                        && w.node_owner.contains_key(&events.dst()[e])
                );
            }
        }
        assert_eq!(
            four,
            WindowShards::build(&events, 4, 700, ShardStrategy::Topology, 0).expect("valid"),
            "deterministic"
        );
    }

    #[test]
    fn topology_beats_sequential_on_the_synthetic_stream_at_every_window() {
        let events = InteractionConfig {
            num_events: 12_000,
            ..Default::default()
        }
        .generate()
        .expect("valid")
        .events;
        for workers in [2, 4] {
            for ratio in
                WindowShards::compare(&events, workers, &[300, 1_200, 4_800], 3).expect("valid")
            {
                assert!(
                    ratio.topology < ratio.sequential,
                    "{workers} workers, window {}: topology {} vs sequential {}",
                    ratio.window,
                    ratio.topology,
                    ratio.sequential
                );
            }
        }
    }

    #[test]
    fn zero_workers_or_window_is_a_typed_error() {
        let events = two_groups(10);
        for (workers, window, field) in [(0, 5, "workers"), (2, 0, "window")] {
            match WindowShards::build(&events, workers, window, ShardStrategy::Sequential, 0) {
                Err(TemporalError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
    }
}

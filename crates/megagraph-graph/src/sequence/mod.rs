//! Grouping the nodes of a graph into sequences (the "tokens" of one Graph Transformer
//! forward pass).
//!
//! [`SequenceStrategy::Locality`] partitions the graph so that most edges stay inside a
//! sequence: attention then sees whole neighbourhoods and distance indexes are informative.
//! [`SequenceStrategy::Random`] is the baseline. [`edge_cut`] measures the difference.

mod partition;
mod reform;
mod reorder;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::graph::Graph;

pub use reform::{BlockReform, ReformThreshold, reform_edges};
pub use reorder::{cluster_order, cluster_parts};

/// How nodes are grouped into sequences (`locality` or `random` in config files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SequenceStrategy {
    /// A seeded random permutation cut into consecutive chunks.
    #[serde(alias = "Random")]
    Random,
    /// A graph partition into the minimal number of parts of at most `seq_len` nodes with few cut
    /// edges: recursive bisection by greedy graph growing plus Fiduccia-Mattheyses refinement
    /// (default).
    #[default]
    #[serde(alias = "Locality")]
    Locality,
}

/// Partitions ALL nodes of `graph` into `ceil(N / seq_len)` sequences of at most `seq_len` nodes
/// (every node exactly once; nodes sorted ascending within a sequence). Deterministic in
/// `seed`. Direction is ignored for [`SequenceStrategy::Locality`] (arcs count as undirected
/// edges); isolated nodes and disconnected components are placed too.
///
/// A `seq_len` of 0 is treated as 1 (with a warning). An empty graph gives no sequences.
pub fn node_sequences(
    graph: &Graph,
    seq_len: usize,
    strategy: SequenceStrategy,
    seed: u64,
) -> Vec<Vec<u32>> {
    node_sequences_with_progress(graph, seq_len, strategy, seed, &|_| {})
}

/// [`node_sequences`], calling `progress(n)` (possibly from worker threads) each time `n` more
/// nodes are placed in their final sequence, e.g. to advance a progress bar of
/// `graph.num_nodes()` steps.
pub fn node_sequences_with_progress(
    graph: &Graph,
    seq_len: usize,
    strategy: SequenceStrategy,
    seed: u64,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<u32>> {
    let seq_len = if seq_len == 0 {
        log::warn!("node_sequences: seq_len 0 treated as 1");
        1
    } else {
        seq_len
    };
    let n = graph.num_nodes();
    if n == 0 {
        return Vec::new();
    }
    match strategy {
        SequenceStrategy::Random => {
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            let sequences = order
                .chunks(seq_len)
                .map(|chunk| {
                    let mut s = chunk.to_vec();
                    s.sort_unstable();
                    s
                })
                .collect();
            progress(n);
            sequences
        }
        SequenceStrategy::Locality => partition::partition(graph, seq_len, seed, progress),
    }
}

/// Fraction of undirected edges `{u, v}` (`u != v`, counted once however many arcs join them)
/// whose endpoints are not in the same sequence. Edges touching a node that is in no sequence
/// count as cut; sequences are assumed disjoint. Returns 0 for a graph without such edges.
///
/// # Panics
/// If a sequence holds a node id `>= graph.num_nodes()`.
pub fn edge_cut(graph: &Graph, sequences: &[Vec<u32>]) -> f64 {
    const NONE: u32 = u32::MAX;
    let mut seq_of = vec![NONE; graph.num_nodes()];
    for (i, seq) in sequences.iter().enumerate() {
        for &v in seq {
            seq_of[v as usize] = i as u32;
        }
    }
    let (mut total, mut cut) = (0u64, 0u64);
    for (u, v) in graph.arcs() {
        // Count {u, v} once: from the smaller endpoint, or from the larger one if the arc
        // from the smaller does not exist.
        let counted = u < v || (u > v && !graph.is_symmetric() && !graph.has_edge(v, u));
        if counted {
            total += 1;
            let (a, b) = (seq_of[u as usize], seq_of[v as usize]);
            if a == NONE || a != b {
                cut += 1;
            }
        }
    }
    if total == 0 {
        0.0
    } else {
        cut as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphOptions, SelfLoops};
    use crate::synthetic::{CsbmConfig, PowerLawConfig};

    fn assert_partition(seqs: &[Vec<u32>], n: usize, seq_len: usize) {
        let mut seen = vec![false; n];
        for s in seqs {
            assert!(
                !s.is_empty() && s.len() <= seq_len,
                "sequence of {} nodes",
                s.len()
            );
            assert!(s.windows(2).all(|w| w[0] < w[1]), "not sorted");
            for &v in s {
                assert!(!seen[v as usize], "node {v} twice");
                seen[v as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "a node is missing");
        assert_eq!(seqs.len(), n.div_ceil(seq_len));
    }

    #[test]
    fn edge_cut_counts_undirected_edges_once() {
        let options = GraphOptions {
            symmetrize: false,
            self_loops: SelfLoops::Keep,
        };
        // {0,1} both ways, {1,2} one way, {2,3} one way, a self loop on 3.
        let g = Graph::from_edges(4, &[(0, 1), (1, 0), (2, 1), (2, 3), (3, 3)], &options).unwrap();
        assert_eq!(edge_cut(&g, &[vec![0, 1], vec![2, 3]]), 1.0 / 3.0);
        assert_eq!(edge_cut(&g, &[vec![0, 1, 2, 3]]), 0.0);
        assert_eq!(edge_cut(&g, &[vec![0], vec![1], vec![2], vec![3]]), 1.0);
        assert_eq!(edge_cut(&g, &[vec![0, 1]]), 2.0 / 3.0);
        let sym =
            Graph::from_edges(4, &[(0, 1), (2, 1), (2, 3)], &GraphOptions::default()).unwrap();
        assert_eq!(edge_cut(&sym, &[vec![0, 1], vec![2, 3]]), 1.0 / 3.0);
    }

    #[test]
    fn both_strategies_cover_every_node_once() {
        let ds = CsbmConfig::default().generate().unwrap();
        for strategy in [SequenceStrategy::Random, SequenceStrategy::Locality] {
            for seq_len in [1, 7, 256, 1000, 2000, 5000] {
                let seqs = node_sequences(&ds.graph, seq_len, strategy, 3);
                assert_partition(&seqs, 2000, seq_len);
            }
        }
    }

    #[test]
    fn deterministic_in_the_seed() {
        let ds = CsbmConfig::default().generate().unwrap();
        for strategy in [SequenceStrategy::Random, SequenceStrategy::Locality] {
            let a = node_sequences(&ds.graph, 128, strategy, 1);
            assert_eq!(a, node_sequences(&ds.graph, 128, strategy, 1));
            assert_ne!(a, node_sequences(&ds.graph, 128, strategy, 2));
        }
    }

    #[test]
    fn locality_cuts_far_fewer_edges_than_random() {
        // The default benchmark dataset, and one with 16 planted communities of 256 nodes.
        let planted = CsbmConfig {
            num_nodes: 4096,
            num_classes: 16,
            homophily: 0.9,
            ..CsbmConfig::default()
        };
        for (cfg, max_ratio) in [(CsbmConfig::default(), 0.5), (planted, 0.25)] {
            let g = cfg.generate().unwrap().graph;
            let random = edge_cut(&g, &node_sequences(&g, 256, SequenceStrategy::Random, 0));
            let local = edge_cut(&g, &node_sequences(&g, 256, SequenceStrategy::Locality, 0));
            eprintln!(
                "{} nodes: random cut {random:.3}, locality cut {local:.3}",
                cfg.num_nodes
            );
            assert!(random > 0.85, "random cut {random}");
            assert!(
                local < max_ratio * random,
                "locality cut {local} vs random {random}"
            );
        }
    }

    #[test]
    fn locality_keeps_planted_components_whole() {
        // 8 disjoint 50-node cycles plus 30 isolated nodes, shuffled ids: with seq_len 100 a
        // good partition cuts nothing.
        let n = 8 * 50 + 30;
        let mut ids: Vec<u32> = (0..n as u32).collect();
        ids.shuffle(&mut ChaCha8Rng::seed_from_u64(9));
        let mut edges = Vec::new();
        for c in 0..8 {
            for i in 0..50 {
                edges.push((ids[c * 50 + i], ids[c * 50 + (i + 1) % 50]));
            }
        }
        let g = Graph::from_edges(n, &edges, &GraphOptions::default()).unwrap();
        let seqs = node_sequences(&g, 100, SequenceStrategy::Locality, 0);
        assert_partition(&seqs, n, 100);
        assert_eq!(edge_cut(&g, &seqs), 0.0, "{seqs:?}");
    }

    #[test]
    fn directed_graphs_and_edge_cases() {
        let options = GraphOptions {
            symmetrize: false,
            self_loops: SelfLoops::Keep,
        };
        let g = Graph::from_edges(5, &[(0, 1), (1, 2), (3, 3)], &options).unwrap();
        let seqs = node_sequences(&g, 3, SequenceStrategy::Locality, 0);
        assert_partition(&seqs, 5, 3);
        assert_eq!(edge_cut(&g, &seqs), 0.0);
        let empty = Graph::from_edges(0, &[], &GraphOptions::default()).unwrap();
        assert!(node_sequences(&empty, 4, SequenceStrategy::Locality, 0).is_empty());
        let seqs = node_sequences(&g, 0, SequenceStrategy::Random, 0);
        assert_partition(&seqs, 5, 1);
    }

    #[test]
    fn locality_scales_to_a_power_law_graph() {
        let g = PowerLawConfig {
            num_nodes: 50_000,
            avg_degree: 10.0,
            ..PowerLawConfig::default()
        }
        .generate()
        .unwrap();
        let start = std::time::Instant::now();
        let seqs = node_sequences(&g, 256, SequenceStrategy::Locality, 0);
        let elapsed = start.elapsed();
        assert_partition(&seqs, 50_000, 256);
        let random = edge_cut(&g, &node_sequences(&g, 256, SequenceStrategy::Random, 0));
        let local = edge_cut(&g, &seqs);
        assert!(local < random, "locality {local} vs random {random}");
        assert!(elapsed.as_secs_f64() < 20.0, "took {elapsed:?}");
    }

    #[test]
    fn progress_counts_every_node_once_and_changes_nothing() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let g = PowerLawConfig {
            num_nodes: 9_000,
            ..PowerLawConfig::default()
        }
        .generate()
        .unwrap();
        for strategy in [SequenceStrategy::Locality, SequenceStrategy::Random] {
            let placed = AtomicUsize::new(0);
            let calls = AtomicUsize::new(0);
            let seqs = node_sequences_with_progress(&g, 128, strategy, 3, &|n| {
                placed.fetch_add(n, Ordering::Relaxed);
                calls.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(placed.into_inner(), 9_000, "{strategy:?}");
            if strategy == SequenceStrategy::Locality {
                assert!(calls.into_inner() >= seqs.len(), "one call per part at least");
            }
            assert_eq!(seqs, node_sequences(&g, 128, strategy, 3));
        }
    }
}

//! [`reform_edges`]: TorchGT's elastic computation reformation. In a sequence ordered cluster by
//! cluster ([`cluster_order`](super::cluster_order)), the edges between a pair of clusters whose
//! density is at most a threshold `p` are replaced by as many nonzeros as dense `block × block`
//! tiles (at random tile positions of the pair's region), which a block-sparse kernel computes
//! faster than scattered edges; denser pairs keep their edges.

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Which cluster pairs become dense tiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReformThreshold {
    /// The paper's rule: pairs of density at most `p = β · E / N²` (`E` edges over `N` positions)
    /// become tiles; `β` is tuned during training (see `megagraph_train::BetaTuner`).
    Beta(f64),
    /// TorchGT's released code, which sets `p = 1`: every pair becomes tiles (the default of
    /// `--block-reform`, as in the code the paper's results were measured with).
    All,
}

/// How [`reform_edges`] reforms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockReform {
    /// Side of a dense tile (16 in TorchGT).
    pub block: usize,
    /// Which pairs become tiles.
    pub threshold: ReformThreshold,
    /// Seed of the tile positions.
    pub seed: u64,
}

impl Default for BlockReform {
    fn default() -> Self {
        Self {
            block: 16,
            threshold: ReformThreshold::All,
            seed: 0,
        }
    }
}

/// The edges `(src, dst)` (positions) of a sequence made of contiguous clusters of
/// `cluster_sizes` positions, reformed: for the edges from cluster `i` to cluster `j`, with
/// density `d = e_ij / (n_i · n_j)`, pairs with `d ≤ p` are replaced by `⌊e_ij / block²⌋ + 1`
/// tiles of `block × block` pairs at random tile-aligned places of the pair's region (so a pair
/// without edges gets one tile, as in TorchGT); the others keep their edges. A pair whose
/// clusters are smaller than a tile keeps its edges (TorchGT drops them). The result is sorted
/// and free of repeats.
///
/// # Panics
/// If an edge names a position past the clusters, or `block` is 0.
pub fn reform_edges(edges: &[(u32, u32)], cluster_sizes: &[usize], reform: &BlockReform) -> Vec<(u32, u32)> {
    assert!(reform.block > 0, "a tile of side 0");
    let k = cluster_sizes.len();
    let offsets: Vec<usize> = std::iter::once(0)
        .chain(cluster_sizes.iter().scan(0, |end, &size| {
            *end += size;
            Some(*end)
        }))
        .collect();
    let n = offsets[k];
    let cluster_of = |position: u32| {
        let position = position as usize;
        assert!(position < n, "edge position {position} past the {n} clustered positions");
        offsets.partition_point(|&start| start <= position) - 1
    };
    let mut pair_edges = vec![Vec::new(); k * k];
    for &(src, dst) in edges {
        pair_edges[cluster_of(src) * k + cluster_of(dst)].push((src, dst));
    }
    let p = match reform.threshold {
        ReformThreshold::All => 1.0,
        ReformThreshold::Beta(beta) => beta * edges.len() as f64 / (n as f64 * n as f64).max(1.0),
    };
    let tile = reform.block;
    let mut out = BTreeSet::new();
    for (pair, kept) in pair_edges.into_iter().enumerate() {
        let (i, j) = (pair / k, pair % k);
        let (rows, columns) = (cluster_sizes[i], cluster_sizes[j]);
        let density = kept.len() as f64 / (rows * columns).max(1) as f64;
        if density > p || rows < tile || columns < tile {
            out.extend(kept);
            continue;
        }
        let tiles = kept.len() / (tile * tile) + 1;
        let mut rng = ChaCha8Rng::seed_from_u64(reform.seed ^ (pair as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for _ in 0..tiles {
            let src0 = offsets[i] + rng.random_range(0..rows / tile) * tile;
            let dst0 = offsets[j] + rng.random_range(0..columns / tile) * tile;
            for src in src0..src0 + tile {
                out.extend((dst0..dst0 + tile).map(|dst| (src as u32, dst as u32)));
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters of 32: cluster 0 dense inside (every other pair), one edge from 0 to 1, none
    /// from 1 to 0, cluster 1 with a path inside.
    fn edges() -> Vec<(u32, u32)> {
        let mut edges: Vec<(u32, u32)> = (0..32u32).flat_map(|s| (0..32u32).filter(move |d| (s + d) % 2 == 0).map(move |d| (s, d))).collect();
        edges.push((3, 40));
        edges.extend((32..63u32).map(|s| (s, s + 1)));
        edges
    }

    #[test]
    fn sparse_pairs_become_tiles_and_dense_pairs_keep_their_edges() {
        let edges = edges();
        let reform = BlockReform { threshold: ReformThreshold::Beta(1.0), ..BlockReform::default() };
        // p = 1 · 544 / 64² ≈ 0.13: pair (0,0) has density 0.5 and keeps its 512 edges; the others
        // (1/1024, 0, 31/1024) each become one 16 × 16 tile
        let reformed = reform_edges(&edges, &[32, 32], &reform);
        let in_pair = |i: u32, j: u32| reformed.iter().filter(|&&(s, d)| s / 32 == i && d / 32 == j).count();
        assert_eq!(in_pair(0, 0), 512);
        assert!(edges.iter().filter(|&&(s, d)| s < 32 && d < 32).all(|e| reformed.binary_search(e).is_ok()));
        for (i, j) in [(0, 1), (1, 0), (1, 1)] {
            assert_eq!(in_pair(i, j), 256, "pair ({i}, {j})");
            // one tile-aligned 16 × 16 square
            let (s0, d0) = reformed.iter().find(|&&(s, d)| s / 32 == i && d / 32 == j).copied().unwrap_or_default();
            assert!(s0 % 16 == 0 && d0 % 16 == 0);
        }
        assert_eq!(reformed, reform_edges(&edges, &[32, 32], &reform), "deterministic in the seed");
    }

    #[test]
    fn the_released_rule_turns_every_pair_into_tiles_and_small_clusters_keep_edges() {
        let edges = edges();
        let reformed = reform_edges(&edges, &[32, 32], &BlockReform::default());
        // pair (0,0): 512 edges → 512 / 256 + 1 = 3 tiles (some may coincide); the others 1 each
        let in_pair = |i: u32, j: u32| reformed.iter().filter(|&&(s, d)| s / 32 == i && d / 32 == j).count();
        assert!(in_pair(0, 0) % 256 == 0 && (256..=768).contains(&in_pair(0, 0)));
        assert_eq!(in_pair(1, 1), 256);
        // clusters of 8 are smaller than a tile: their edges stay
        let small = [(0, 1), (1, 9), (9, 15)];
        assert_eq!(reform_edges(&small, &[8, 8], &BlockReform::default()), small.to_vec());
    }
}

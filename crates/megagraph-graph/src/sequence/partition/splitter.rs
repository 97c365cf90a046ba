//! The recursion of the bisection: a node set is split into two sides sized for their numbers
//! of parts, and both sides recurse.

use super::balance::Balance;
use super::bisect::bisect;
use super::weighted::WeightedGraph;
use super::{chunks, mix};

/// Node sets above this size recurse in parallel.
const PARALLEL_MIN_NODES: usize = 4096;

/// The recursion of the bisection.
pub(super) struct Splitter<'a> {
    /// The most nodes of one part.
    pub(super) cap: usize,
    /// Told how many nodes reached their final part.
    pub(super) progress: &'a (dyn Fn(usize) + Sync),
}

impl Splitter<'_> {
    /// Splits `nodes` (whose induced subgraph is `g`, local id `i` = `nodes[i]`) into `k` parts.
    /// `coarsen` is false once coarsening stopped paying off higher up the recursion.
    pub(super) fn split(
        &self,
        nodes: Vec<u32>,
        g: WeightedGraph,
        k: usize,
        coarsen: bool,
        seed: u64,
    ) -> Vec<Vec<u32>> {
        if k <= 1 {
            (self.progress)(nodes.len());
            // The balance bounds guarantee nodes.len() <= cap; chunking is only a safety net.
            return if nodes.len() <= self.cap {
                vec![nodes]
            } else {
                chunks(nodes, self.cap)
            };
        }
        let n = nodes.len();
        let k1 = k.div_ceil(2);
        let k2 = k - k1;
        let hi = (k1 * self.cap).min(n);
        let lo = n.saturating_sub(k2 * self.cap);
        let target = ((n as f64 * k1 as f64 / k as f64).round() as usize).clamp(lo, hi);
        let (side, coarsened) = bisect(&g, Balance { target, lo, hi }, coarsen, seed);
        let (ga, gb) = if n >= PARALLEL_MIN_NODES {
            rayon::join(|| g.induced(&side, 0), || g.induced(&side, 1))
        } else {
            (g.induced(&side, 0), g.induced(&side, 1))
        };
        drop(g);
        let (mut a, mut b) = (Vec::with_capacity(target), Vec::with_capacity(n - target));
        for (i, &v) in nodes.iter().enumerate() {
            if side[i] == 0 { a.push(v) } else { b.push(v) }
        }
        drop(nodes);
        let (sa, sb) = (mix(seed, 1), mix(seed, 2));
        let (mut left, right) = if n >= PARALLEL_MIN_NODES {
            rayon::join(
                || self.split(a, ga, k1, coarsened, sa),
                || self.split(b, gb, k2, coarsened, sb),
            )
        } else {
            (
                self.split(a, ga, k1, coarsened, sa),
                self.split(b, gb, k2, coarsened, sb),
            )
        };
        left.extend(right);
        left
    }
}

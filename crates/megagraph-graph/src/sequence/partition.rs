//! Size-capped graph partitioning by recursive bisection.
//!
//! To split `n` nodes into `k = ceil(n / cap)` parts, a node set is bisected into sides that
//! will hold `ceil(k / 2)` and `floor(k / 2)` parts, each side's size kept within what its parts
//! can hold. Each bisection grows side 0 greedily from a pseudo-peripheral node (greedy graph
//! growing: always add the frontier node with the most edges into the region), then improves it
//! with Fiduccia-Mattheyses passes (single-node moves in gain order, allowing temporary
//! imbalance and negative moves, rolled back to the best balanced prefix). Several growth starts
//! are tried on small sets. Both halves recurse in parallel; every choice is seeded from the
//! caller's seed and the position in the recursion, so the result does not depend on the
//! thread count.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::graph::{Graph, GraphOptions, SelfLoops};

/// Node sets above this size recurse in parallel.
const PARALLEL_MIN_NODES: usize = 4096;
/// Maximum Fiduccia-Mattheyses passes per bisection.
const MAX_PASSES: usize = 8;

/// Partitions the nodes of `graph` into `ceil(N / cap)` parts of at most `cap` nodes each.
pub(crate) fn partition(graph: &Graph, cap: usize, seed: u64) -> Vec<Vec<u32>> {
    let n = graph.num_nodes();
    let k = n.div_ceil(cap);
    let symmetric;
    let adj = if graph.is_symmetric() {
        graph
    } else {
        let arcs: Vec<(u32, u32)> = graph.arcs().collect();
        // Cannot fail: the arcs come from a valid graph of the same size.
        symmetric = match Graph::from_edges(
            n,
            &arcs,
            &GraphOptions {
                symmetrize: true,
                self_loops: SelfLoops::Remove,
            },
        ) {
            Ok(g) => g,
            Err(_) => return fallback(n, cap),
        };
        &symmetric
    };
    let ctx = Context {
        adj,
        cap,
        owner: (0..n).map(|_| AtomicU32::new(u32::MAX)).collect(),
        local: (0..n).map(|_| AtomicU32::new(0)).collect(),
        next_id: AtomicU32::new(0),
    };
    let mut parts = ctx.split((0..n as u32).collect(), k, mix(seed, 0x5eed));
    for p in &mut parts {
        p.sort_unstable();
    }
    parts
}

/// Consecutive chunks (only if an internal invariant failed).
fn fallback(n: usize, cap: usize) -> Vec<Vec<u32>> {
    (0..n as u32)
        .collect::<Vec<_>>()
        .chunks(cap)
        .map(<[u32]>::to_vec)
        .collect()
}

/// SplitMix64-style mixing of a seed with a salt.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Context<'a> {
    adj: &'a Graph,
    cap: usize,
    /// Id of the subgraph task a node currently belongs to (disjoint sets, so tasks never
    /// write the same entry concurrently; atomics keep the sharing safe).
    owner: Vec<AtomicU32>,
    /// Index of a node inside its current subgraph.
    local: Vec<AtomicU32>,
    next_id: AtomicU32,
}

/// The subgraph induced by a node set, with local ids `0..n`.
struct Subgraph {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Subgraph {
    fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    fn neighbors(&self, v: usize) -> &[u32] {
        &self.targets[self.offsets[v]..self.offsets[v + 1]]
    }
    fn degree(&self, v: usize) -> i32 {
        (self.offsets[v + 1] - self.offsets[v]) as i32
    }
}

impl Context<'_> {
    fn split(&self, nodes: Vec<u32>, k: usize, seed: u64) -> Vec<Vec<u32>> {
        if k <= 1 {
            return vec![nodes];
        }
        let n = nodes.len();
        let k1 = k.div_ceil(2);
        let k2 = k - k1;
        let hi = (k1 * self.cap).min(n);
        let lo = n.saturating_sub(k2 * self.cap);
        let target = ((n as f64 * k1 as f64 / k as f64).round() as usize).clamp(lo, hi);
        let sub = self.subgraph(&nodes);
        let side = bisect(&sub, target, lo, hi, seed);
        let (mut a, mut b) = (Vec::with_capacity(target), Vec::with_capacity(n - target));
        for (i, &v) in nodes.iter().enumerate() {
            if side[i] == 0 { a.push(v) } else { b.push(v) }
        }
        drop(sub);
        drop(nodes);
        let (sa, sb) = (mix(seed, 1), mix(seed, 2));
        let (mut left, right) = if n >= PARALLEL_MIN_NODES {
            rayon::join(|| self.split(a, k1, sa), || self.split(b, k2, sb))
        } else {
            (self.split(a, k1, sa), self.split(b, k2, sb))
        };
        left.extend(right);
        left
    }

    fn subgraph(&self, nodes: &[u32]) -> Subgraph {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        for (i, &v) in nodes.iter().enumerate() {
            self.owner[v as usize].store(id, Ordering::Relaxed);
            self.local[v as usize].store(i as u32, Ordering::Relaxed);
        }
        let mut offsets = Vec::with_capacity(nodes.len() + 1);
        offsets.push(0);
        let mut targets = Vec::new();
        for &v in nodes {
            for &w in self.adj.neighbors(v) {
                if w != v && self.owner[w as usize].load(Ordering::Relaxed) == id {
                    targets.push(self.local[w as usize].load(Ordering::Relaxed));
                }
            }
            offsets.push(targets.len());
        }
        Subgraph { offsets, targets }
    }
}

/// Bisects `sub` into side 0 (size in `[lo, hi]`, aiming at `target`) and side 1, minimizing
/// cut edges. Returns the side of every local node.
fn bisect(sub: &Subgraph, target: usize, lo: usize, hi: usize, seed: u64) -> Vec<u8> {
    let n = sub.len();
    if target == 0 {
        return vec![1; n];
    }
    if target == n {
        return vec![0; n];
    }
    let tries = match sub.targets.len() {
        0..=50_000 => 4,
        50_001..=500_000 => 2,
        _ => 1,
    };
    let mut best: Option<(u64, Vec<u8>)> = None;
    for t in 0..tries {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 100 + t));
        let tiebreak: Vec<u32> = (0..n).map(|_| rng.random()).collect();
        let mut side = grow(sub, target, &tiebreak, &mut rng);
        let cut = refine(sub, &mut side, target, lo, hi, &tiebreak);
        if best.as_ref().is_none_or(|(c, _)| cut < *c) {
            best = Some((cut, side));
        }
        if cut == 0 {
            break;
        }
    }
    best.map_or_else(|| vec![1; n], |(_, s)| s)
}

/// Number of edges between the two sides.
fn cut_size(sub: &Subgraph, side: &[u8]) -> u64 {
    (0..sub.len())
        .filter(|&v| side[v] == 0)
        .map(|v| {
            sub.neighbors(v)
                .iter()
                .filter(|&&w| side[w as usize] == 1)
                .count() as u64
        })
        .sum()
}

/// The last node reached by a BFS from `start` (a pseudo-peripheral node of its component).
fn farthest(sub: &Subgraph, start: usize) -> usize {
    let mut seen = vec![false; sub.len()];
    let mut queue = std::collections::VecDeque::from([start]);
    seen[start] = true;
    let mut last = start;
    while let Some(u) = queue.pop_front() {
        last = u;
        for &w in sub.neighbors(u) {
            if !seen[w as usize] {
                seen[w as usize] = true;
                queue.push_back(w as usize);
            }
        }
    }
    last
}

/// Greedy graph growing: grows side 0 to `target` nodes, always adding the frontier node whose
/// move reduces the cut most; restarts from a random unassigned node when the frontier is empty
/// (another component).
fn grow(sub: &Subgraph, target: usize, tiebreak: &[u32], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let n = sub.len();
    let mut side = vec![1u8; n];
    let mut conn = vec![0i32; n];
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(rng);
    let mut next_seed = 0usize;
    let mut heap: BinaryHeap<(i32, u32, u32)> = BinaryHeap::new();
    let start = farthest(sub, order[0] as usize);
    heap.push((-sub.degree(start), tiebreak[start], start as u32));
    let mut size = 0;
    while size < target {
        let v = match heap.pop() {
            Some((gain, _, v)) => {
                let v = v as usize;
                if side[v] == 0 || gain != 2 * conn[v] - sub.degree(v) {
                    continue;
                }
                v
            }
            None => {
                while side[order[next_seed] as usize] == 0 {
                    next_seed += 1;
                }
                order[next_seed] as usize
            }
        };
        side[v] = 0;
        size += 1;
        for &w in sub.neighbors(v) {
            let w = w as usize;
            conn[w] += 1;
            if side[w] == 1 {
                heap.push((2 * conn[w] - sub.degree(w), tiebreak[w], w as u32));
            }
        }
    }
    side
}

/// Fiduccia-Mattheyses refinement keeping side 0's size in `[lo, hi]`; returns the final cut.
fn refine(
    sub: &Subgraph,
    side: &mut [u8],
    target: usize,
    lo: usize,
    hi: usize,
    tiebreak: &[u32],
) -> u64 {
    let n = sub.len();
    // gain[v] = (edges to the other side) - (edges to its own side): the cut reduction of moving v.
    let mut gain: Vec<i32> = (0..n)
        .map(|v| {
            sub.neighbors(v)
                .iter()
                .map(|&w| if side[w as usize] != side[v] { 1 } else { -1 })
                .sum()
        })
        .collect();
    let mut size0 = side.iter().filter(|&&s| s == 0).count();
    let slack = (n / 128).clamp(2, 64);
    let (lo_tmp, hi_tmp) = (lo.saturating_sub(slack), (hi + slack).min(n));
    let stall_limit = (100 + n / 100).min(1000);
    let mut locked = vec![false; n];
    let mut moves: Vec<u32> = Vec::new();

    for _ in 0..MAX_PASSES {
        let mut heaps: [BinaryHeap<(i32, u32, u32)>; 2] = [BinaryHeap::new(), BinaryHeap::new()];
        for v in 0..n {
            // Boundary nodes, plus isolated nodes: free moves that fix the balance.
            let nbrs = sub.neighbors(v);
            if nbrs.is_empty() || nbrs.iter().any(|&w| side[w as usize] != side[v]) {
                heaps[side[v] as usize].push((gain[v], tiebreak[v], v as u32));
            }
        }
        locked.fill(false);
        moves.clear();
        let (mut total, mut best_total) = (0i64, 0i64);
        let mut best_len = 0usize;
        let mut best_imbalance = size0.abs_diff(target);
        loop {
            // Valid top of each heap whose move keeps the temporary balance.
            let mut top = [None, None];
            for s in 0..2 {
                let allowed = if s == 0 {
                    size0 > lo_tmp
                } else {
                    size0 < hi_tmp
                };
                if !allowed {
                    continue;
                }
                while let Some(&(g, _, v)) = heaps[s].peek() {
                    let vu = v as usize;
                    if locked[vu] || side[vu] as usize != s || gain[vu] != g {
                        heaps[s].pop();
                    } else {
                        top[s] = Some((g, v));
                        break;
                    }
                }
            }
            let from = match (top[0], top[1]) {
                (None, None) => break,
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (Some((g0, _)), Some((g1, _))) => {
                    if g0 != g1 {
                        usize::from(g1 > g0)
                    } else {
                        usize::from(size0 <= target)
                    }
                }
            };
            let Some((g, v)) = top[from] else { break };
            heaps[from].pop();
            let v = v as usize;
            locked[v] = true;
            move_node(sub, side, &mut gain, v);
            if from == 0 {
                size0 -= 1;
            } else {
                size0 += 1;
            }
            total += i64::from(g);
            moves.push(v as u32);
            for &w in sub.neighbors(v) {
                let w = w as usize;
                if !locked[w] {
                    heaps[side[w] as usize].push((gain[w], tiebreak[w], w as u32));
                }
            }
            if (lo..=hi).contains(&size0) {
                let imbalance = size0.abs_diff(target);
                if total > best_total || (total == best_total && imbalance < best_imbalance) {
                    best_total = total;
                    best_len = moves.len();
                    best_imbalance = imbalance;
                }
            }
            if moves.len() - best_len > stall_limit {
                break;
            }
        }
        // Undo the moves after the best balanced prefix.
        for &v in moves[best_len..].iter().rev() {
            let v = v as usize;
            if side[v] == 0 {
                size0 -= 1;
            } else {
                size0 += 1;
            }
            move_node(sub, side, &mut gain, v);
        }
        if best_total <= 0 {
            break;
        }
    }
    cut_size(sub, side)
}

/// Moves `v` to the other side, updating its and its neighbours' gains.
fn move_node(sub: &Subgraph, side: &mut [u8], gain: &mut [i32], v: usize) {
    side[v] ^= 1;
    gain[v] = -gain[v];
    for &w in sub.neighbors(v) {
        let w = w as usize;
        // w's edge to v switched between internal and external.
        if side[w] == side[v] {
            gain[w] -= 2;
        } else {
            gain[w] += 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub_of(graph: &Graph) -> Subgraph {
        let n = graph.num_nodes();
        let ctx = Context {
            adj: graph,
            cap: n,
            owner: (0..n).map(|_| AtomicU32::new(u32::MAX)).collect(),
            local: (0..n).map(|_| AtomicU32::new(0)).collect(),
            next_id: AtomicU32::new(0),
        };
        ctx.subgraph(&(0..n as u32).collect::<Vec<_>>())
    }

    #[test]
    fn refinement_gains_stay_consistent_and_cut_never_grows() {
        let ds = crate::synthetic::CsbmConfig {
            num_nodes: 600,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let sub = sub_of(&ds.graph);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let tiebreak: Vec<u32> = (0..600).map(|_| rng.random()).collect();
        // A random balanced start: refinement must lower its cut a lot.
        let mut side: Vec<u8> = (0..600).map(|v| u8::from(v % 2 == 1)).collect();
        side.shuffle(&mut rng);
        let before = cut_size(&sub, &side);
        let after = refine(&sub, &mut side, 300, 290, 310, &tiebreak);
        assert_eq!(after, cut_size(&sub, &side));
        let size0 = side.iter().filter(|&&s| s == 0).count();
        assert!((290..=310).contains(&size0), "size0 {size0}");
        assert!(after < before * 3 / 4, "cut {before} -> {after}");
    }

    #[test]
    fn zero_slack_bisection_still_improves() {
        // Two 100-node cliques joined by a matching, randomly split 100/100: FM with exact
        // balance must still find the clique split by temporary imbalance (swaps).
        let mut edges = Vec::new();
        for c in 0..2u32 {
            for i in 0..100 {
                for j in (i + 1)..100 {
                    edges.push((c * 100 + i, c * 100 + j));
                }
            }
        }
        for i in 0..100 {
            edges.push((i, 100 + i));
        }
        let g = Graph::from_edges(200, &edges, &GraphOptions::default()).unwrap();
        let sub = sub_of(&g);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let tiebreak: Vec<u32> = (0..200).map(|_| rng.random()).collect();
        let side = bisect(&sub, 100, 100, 100, 4);
        assert_eq!(side.iter().filter(|&&s| s == 0).count(), 100);
        assert_eq!(cut_size(&sub, &side), 100);
        let mut random: Vec<u8> = (0..200).map(|v| u8::from(v % 2 == 1)).collect();
        random.shuffle(&mut rng);
        let cut = refine(&sub, &mut random, 100, 100, 100, &tiebreak);
        assert_eq!(random.iter().filter(|&&s| s == 0).count(), 100);
        assert!(cut < 2000, "cut {cut}");
    }
}

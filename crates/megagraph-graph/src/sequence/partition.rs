//! Size-capped graph partitioning by multilevel recursive bisection.
//!
//! To split `n` nodes into `k = ceil(n / cap)` parts, a node set is bisected into sides that
//! will hold `ceil(k / 2)` and `floor(k / 2)` parts, side 0's size kept within `[lo, hi]` so
//! both sides fit their parts; both halves then recurse (in parallel for large sets).
//!
//! Each bisection is multilevel, in the manner of METIS: the subgraph is coarsened by
//! heavy-edge matching (merged nodes and edges carry weights) down to about
//! [`COARSEN_TO`] nodes; the coarsest graph is bisected by greedy graph growing from a
//! pseudo-peripheral node (always adding the frontier node with the most edge weight into the
//! region; several starts); the bisection is then projected back level by level and improved
//! at each level by Fiduccia-Mattheyses passes (moves in gain order, temporary imbalance and
//! negative moves allowed, rolled back to the best prefix). On the original subgraph the balance
//! bounds are exact, and a final step enforces them, so every part holds at most `cap` nodes.
//!
//! Where coarsening stops paying off (edges barely merge around the hubs of power-law graphs),
//! that bisection and the levels below it bisect the graph directly; on large graphs a sample of
//! arcs predicts this before the coarse graph is built (its rows are built in parallel). Child
//! subgraphs are cut out of the parent's local graph (both sides in parallel), so a recursion
//! level costs the arcs still inside parts, not a scan of the whole graph. Every random choice is seeded from the caller's seed and the
//! position in the recursion, so the result does not depend on the thread count.

use std::collections::{BinaryHeap, VecDeque};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::graph::{Graph, GraphOptions, SelfLoops};

/// Node sets above this size recurse in parallel.
const PARALLEL_MIN_NODES: usize = 4096;
/// Coarsening stops at about this many nodes.
const COARSEN_TO: usize = 160;
/// Maximum Fiduccia-Mattheyses passes per level.
const MAX_PASSES: usize = 6;
/// Greedy-growing starts tried on the coarsest graph.
const INITIAL_TRIES: u64 = 6;
/// Graphs above `2 * COARSEN_TO` nodes with fewer arcs than this get two greedy-growing starts,
/// larger ones one.
const INITIAL_WORK: usize = 400_000;

/// Partitions the nodes of `graph` into `ceil(N / cap)` parts of at most `cap` nodes each.
/// `progress(n)` is called each time `n` more nodes are in their final part.
pub(crate) fn partition(
    graph: &Graph,
    cap: usize,
    seed: u64,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<Vec<u32>> {
    let n = graph.num_nodes();
    let k = n.div_ceil(cap);
    let symmetric;
    let adj = if graph.is_symmetric() {
        graph
    } else {
        let arcs: Vec<(u32, u32)> = graph.arcs().collect();
        let options = GraphOptions {
            symmetrize: true,
            self_loops: SelfLoops::Remove,
        };
        // Cannot fail: the arcs come from a valid graph with the same node count.
        symmetric = match Graph::from_edges(n, &arcs, &options) {
            Ok(g) => g,
            Err(_) => {
                progress(n);
                return chunks((0..n as u32).collect(), cap);
            }
        };
        &symmetric
    };
    let whole = WeightedGraph::from_graph(adj);
    let mut parts = Splitter { cap, progress }.split(
        (0..n as u32).collect(),
        whole,
        k,
        true,
        mix(seed, 0x5eed),
    );
    for p in &mut parts {
        p.sort_unstable();
    }
    parts
}

/// Consecutive chunks of at most `cap` nodes.
fn chunks(nodes: Vec<u32>, cap: usize) -> Vec<Vec<u32>> {
    nodes.chunks(cap.max(1)).map(<[u32]>::to_vec).collect()
}

/// SplitMix64-style mixing of a seed with a salt.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The recursion of the bisection.
struct Splitter<'a> {
    cap: usize,
    /// Told how many nodes reached their final part.
    progress: &'a (dyn Fn(usize) + Sync),
}

/// An undirected graph with node and edge weights, local ids `0..n`.
struct WeightedGraph {
    offsets: Vec<usize>,
    targets: Vec<u32>,
    edge_weights: Vec<u32>,
    node_weights: Vec<u32>,
    total_weight: usize,
}

impl WeightedGraph {
    fn len(&self) -> usize {
        self.node_weights.len()
    }

    /// `(neighbour, edge weight)` pairs of `v`.
    fn edges(&self, v: usize) -> impl Iterator<Item = (usize, i64)> + '_ {
        let r = self.offsets[v]..self.offsets[v + 1];
        self.targets[r.clone()]
            .iter()
            .zip(&self.edge_weights[r])
            .map(|(&t, &w)| (t as usize, i64::from(w)))
    }

    fn is_isolated(&self, v: usize) -> bool {
        self.offsets[v] == self.offsets[v + 1]
    }

    fn max_node_weight(&self) -> usize {
        self.node_weights.iter().copied().max().unwrap_or(0) as usize
    }

    /// `graph` with unit weights, self loops dropped (its arcs are taken as undirected edges).
    fn from_graph(graph: &Graph) -> WeightedGraph {
        let n = graph.num_nodes();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut targets = Vec::with_capacity(graph.num_edges());
        for v in 0..n as u32 {
            targets.extend(graph.neighbors(v).iter().filter(|&&w| w != v));
            offsets.push(targets.len());
        }
        WeightedGraph {
            offsets,
            edge_weights: vec![1; targets.len()],
            targets,
            node_weights: vec![1; n],
            total_weight: n,
        }
    }

    /// The subgraph induced by the nodes on side `which`, renumbered in order.
    fn induced(&self, side: &[u8], which: u8) -> WeightedGraph {
        let n = self.len();
        let mut new_id = vec![u32::MAX; n];
        let mut count = 0u32;
        for v in 0..n {
            if side[v] == which {
                new_id[v] = count;
                count += 1;
            }
        }
        let mut offsets = Vec::with_capacity(count as usize + 1);
        offsets.push(0);
        let mut targets = Vec::new();
        let mut edge_weights = Vec::new();
        let mut node_weights = Vec::with_capacity(count as usize);
        for v in (0..n).filter(|&v| side[v] == which) {
            for (w, ew) in self.edges(v) {
                if side[w] == which {
                    targets.push(new_id[w]);
                    edge_weights.push(ew as u32);
                }
            }
            offsets.push(targets.len());
            node_weights.push(self.node_weights[v]);
        }
        let total_weight = node_weights.iter().map(|&w| w as usize).sum();
        WeightedGraph {
            offsets,
            targets,
            edge_weights,
            node_weights,
            total_weight,
        }
    }
}

impl Splitter<'_> {
    /// Splits `nodes` (whose induced subgraph is `g`, local id `i` = `nodes[i]`) into `k` parts.
    /// `coarsen` is false once coarsening stopped paying off higher up the recursion.
    fn split(
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

/// Size bounds of side 0 (in node weight).
#[derive(Debug, Clone, Copy)]
struct Balance {
    /// The ideal size.
    target: usize,
    /// Smallest allowed size.
    lo: usize,
    /// Largest allowed size.
    hi: usize,
}

impl Balance {
    /// How far `size` is outside `[lo, hi]`.
    fn violation(&self, size: usize) -> usize {
        self.lo.saturating_sub(size) + size.saturating_sub(self.hi)
    }

    /// The same bounds widened by `tol` on both sides.
    fn widened(&self, tol: usize, total: usize) -> Balance {
        Balance {
            target: self.target,
            lo: self.lo.saturating_sub(tol),
            hi: (self.hi + tol).min(total),
        }
    }
}

/// Bisects `g` into side 0 (weight within `balance`) and side 1, minimizing the cut weight,
/// multilevel when `coarsen` (and worthwhile). Returns the side of every node, and whether
/// coarsening paid off (if it did not, deeper levels skip it). Exact bounds hold on return when
/// all node weights are 1.
fn bisect(g: &WeightedGraph, balance: Balance, coarsen: bool, seed: u64) -> (Vec<u8>, bool) {
    let n = g.len();
    if balance.hi == 0 {
        return (vec![1; n], coarsen);
    }
    if balance.lo >= g.total_weight {
        return (vec![0; n], coarsen);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tiebreak: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let mut coarsened = coarsen;
    let mut side = 'side: {
        if n > COARSEN_TO && coarsen {
            let max_weight = g.total_weight.div_ceil(COARSEN_TO / 2).max(1);
            // Coarsening pays off only while the graph really shrinks; around the hubs of
            // power-law graphs the edges barely merge, and bisecting directly is as good.
            // (`None`: a sample already showed the arcs would not shrink enough.)
            if let Some((coarse, map)) = coarsen_once(g, max_weight, &tiebreak, &mut rng)
                && coarse.len() as f64 <= 0.95 * n as f64
                && coarse.targets.len() as f64 <= 0.9 * g.targets.len() as f64
            {
                let tol = coarse.max_node_weight();
                let (coarse_side, _) = bisect(
                    &coarse,
                    balance.widened(tol, g.total_weight),
                    true,
                    mix(seed, 7),
                );
                let mut side: Vec<u8> = map.iter().map(|&c| coarse_side[c as usize]).collect();
                let tol = if g.max_node_weight() > 1 {
                    g.max_node_weight()
                } else {
                    0
                };
                refine(
                    g,
                    &mut side,
                    balance.widened(tol, g.total_weight),
                    &tiebreak,
                );
                break 'side side;
            }
            coarsened = false;
        }
        // Already refined.
        initial_bisection(g, balance, &tiebreak, seed)
    };
    if g.max_node_weight() <= 1 {
        enforce(g, &mut side, balance);
    }
    (side, coarsened)
}

/// Greedy graph growing from several starts (up to [`INITIAL_TRIES`]), each refined; the
/// smallest cut wins.
fn initial_bisection(g: &WeightedGraph, balance: Balance, tiebreak: &[u32], seed: u64) -> Vec<u8> {
    let tol = g.max_node_weight().saturating_sub(1);
    let bounds = balance.widened(tol, g.total_weight);
    let mut best: Option<((usize, i64), Vec<u8>)> = None;
    // Several starts on coarsest graphs; large graphs (reached when coarsening does not pay
    // off) get at most two.
    let tries = if g.len() <= 2 * COARSEN_TO {
        INITIAL_TRIES
    } else {
        (INITIAL_WORK / g.targets.len().max(1)).clamp(1, 2) as u64
    };
    for t in 0..tries {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 100 + t));
        let mut side = grow(g, balance.target, tiebreak, &mut rng);
        refine(g, &mut side, bounds, tiebreak);
        let size0 = side_weight(g, &side);
        let key = (bounds.violation(size0), cut_weight(g, &side));
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, side));
        }
        if key == (0, 0) {
            break;
        }
    }
    best.map_or_else(|| vec![1; g.len()], |(_, s)| s)
}

/// Heavy-edge matching: returns the coarse graph and the coarse node of every node. Nodes are
/// visited in random order and matched with the unmatched neighbour joined by the heaviest edge
/// (merged weight at most `max_weight`); isolated nodes are paired with each other. Rows of the
/// coarse graph are built in parallel.
///
/// On graphs of at least [`SAMPLE_MIN_ARCS`] arcs, the share of arcs the coarse graph keeps
/// is first estimated from [`SHRINK_SAMPLES`] arcs drawn at random (each gives its coarse
/// node's merged-row / fine-row length ratio, an unbiased estimate); above
/// [`SKIP_SHRINK_RATIO`] the graph is not built and `None` is returned.
fn coarsen_once(
    g: &WeightedGraph,
    max_weight: usize,
    tiebreak: &[u32],
    rng: &mut ChaCha8Rng,
) -> Option<(WeightedGraph, Vec<u32>)> {
    const UNMATCHED: u32 = u32::MAX;
    let n = g.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(rng);
    let mut mate = vec![UNMATCHED; n];
    let mut lonely: Option<usize> = None;
    for &v in &order {
        let v = v as usize;
        if mate[v] != UNMATCHED {
            continue;
        }
        let wv = g.node_weights[v] as usize;
        if g.is_isolated(v) {
            match lonely.take() {
                Some(u) if g.node_weights[u] as usize + wv <= max_weight => {
                    mate[u] = v as u32;
                    mate[v] = u as u32;
                }
                Some(_) | None => lonely = Some(v),
            }
            continue;
        }
        let mut best: Option<(i64, u32, usize)> = None;
        for (w, ew) in g.edges(v) {
            if mate[w] == UNMATCHED && w != v && g.node_weights[w] as usize + wv <= max_weight {
                let key = (ew, tiebreak[w], w);
                if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                    best = Some(key);
                }
            }
        }
        match best {
            Some((_, _, w)) => {
                mate[v] = w as u32;
                mate[w] = v as u32;
            }
            None => mate[v] = v as u32,
        }
    }
    // Coarse ids in node order.
    let mut map = vec![UNMATCHED; n];
    let mut count = 0u32;
    for v in 0..n {
        if map[v] == UNMATCHED {
            map[v] = count;
            let m = mate[v];
            if m != UNMATCHED {
                map[m as usize] = count;
            }
            count += 1;
        }
    }
    let cn = count as usize;
    let mut members: Vec<[u32; 2]> = vec![[UNMATCHED; 2]; cn];
    for v in 0..n {
        let slot = &mut members[map[v] as usize];
        if slot[0] == UNMATCHED {
            slot[0] = v as u32;
        } else {
            slot[1] = v as u32;
        }
    }
    if g.targets.len() >= SAMPLE_MIN_ARCS
        && estimated_shrink(g, &map, &members, rng) > SKIP_SHRINK_RATIO
    {
        return None;
    }
    // Rows of consecutive coarse nodes are built in parallel blocks, then concatenated.
    let blocks = cn.div_ceil(COARSE_BLOCK);
    let parts: Vec<CoarseRows> = (0..blocks)
        .into_par_iter()
        .map(|b| {
            coarse_rows(
                g,
                &map,
                &members,
                b * COARSE_BLOCK..((b + 1) * COARSE_BLOCK).min(cn),
            )
        })
        .collect();
    let arcs: usize = parts.iter().map(|p| p.targets.len()).sum();
    let mut offsets = Vec::with_capacity(cn + 1);
    offsets.push(0);
    let mut targets: Vec<u32> = Vec::with_capacity(arcs);
    let mut edge_weights: Vec<u32> = Vec::with_capacity(arcs);
    let mut node_weights = Vec::with_capacity(cn);
    for part in parts {
        let base = targets.len();
        offsets.extend(part.ends.iter().map(|&e| base + e));
        targets.extend_from_slice(&part.targets);
        edge_weights.extend_from_slice(&part.edge_weights);
        node_weights.extend_from_slice(&part.node_weights);
    }
    let coarse = WeightedGraph {
        offsets,
        targets,
        edge_weights,
        node_weights,
        total_weight: g.total_weight,
    };
    Some((coarse, map))
}

/// Graphs with at least this many arcs estimate the coarse arc count before building it.
const SAMPLE_MIN_ARCS: usize = 1 << 22;
/// Arcs sampled by [`estimated_shrink`].
const SHRINK_SAMPLES: usize = 256;
/// Coarse graphs estimated to keep more than this share of the arcs are not built (the exact
/// threshold of `bisect` is 0.9; the margin covers the sampling error).
const SKIP_SHRINK_RATIO: f64 = 0.96;

/// Estimated `coarse arcs / fine arcs` of the matching `map` (see [`coarsen_once`]).
fn estimated_shrink(
    g: &WeightedGraph,
    map: &[u32],
    members: &[[u32; 2]],
    rng: &mut ChaCha8Rng,
) -> f64 {
    let arcs = g.targets.len();
    let mut neighbours: Vec<u32> = Vec::new();
    let mut sum = 0.0;
    for _ in 0..SHRINK_SAMPLES {
        let arc = rng.random_range(0..arcs);
        let v = g.offsets.partition_point(|&o| o <= arc) - 1;
        let c = map[v];
        neighbours.clear();
        for &u in members[c as usize].iter().filter(|&&u| u != u32::MAX) {
            neighbours.extend(g.edges(u as usize).map(|(w, _)| map[w]));
        }
        let fine = neighbours.len();
        neighbours.retain(|&cw| cw != c);
        neighbours.sort_unstable();
        neighbours.dedup();
        sum += neighbours.len() as f64 / fine.max(1) as f64;
    }
    sum / SHRINK_SAMPLES as f64
}

/// Coarse nodes per parallel block of [`coarsen_once`].
const COARSE_BLOCK: usize = 1 << 16;

/// The rows of a block of consecutive coarse nodes: row ends relative to the block's start.
struct CoarseRows {
    ends: Vec<usize>,
    targets: Vec<u32>,
    edge_weights: Vec<u32>,
    node_weights: Vec<u32>,
}

/// Builds the coarse rows of the coarse nodes `range` (members as in [`coarsen_once`]):
/// parallel arcs merged with summed weights, arcs inside a coarse node dropped.
fn coarse_rows(
    g: &WeightedGraph,
    map: &[u32],
    members: &[[u32; 2]],
    range: std::ops::Range<usize>,
) -> CoarseRows {
    const UNMATCHED: u32 = u32::MAX;
    let mut rows = CoarseRows {
        ends: Vec::with_capacity(range.len()),
        targets: Vec::new(),
        edge_weights: Vec::new(),
        node_weights: Vec::with_capacity(range.len()),
    };
    // position[c] = index in `targets` of coarse neighbour c in the current row, if present.
    let mut position = vec![usize::MAX; members.len()];
    for c in range {
        let row_start = rows.targets.len();
        let mut weight = 0u32;
        for &v in members[c].iter().filter(|&&v| v != UNMATCHED) {
            let v = v as usize;
            weight += g.node_weights[v];
            for (w, ew) in g.edges(v) {
                let cw = map[w] as usize;
                if cw == c {
                    continue;
                }
                let p = position[cw];
                if p != usize::MAX && p >= row_start {
                    rows.edge_weights[p] += ew as u32;
                } else {
                    position[cw] = rows.targets.len();
                    rows.targets.push(cw as u32);
                    rows.edge_weights.push(ew as u32);
                }
            }
        }
        rows.node_weights.push(weight);
        rows.ends.push(rows.targets.len());
    }
    rows
}

/// Total node weight on side 0.
fn side_weight(g: &WeightedGraph, side: &[u8]) -> usize {
    (0..g.len())
        .filter(|&v| side[v] == 0)
        .map(|v| g.node_weights[v] as usize)
        .sum()
}

/// Total weight of edges between the two sides.
fn cut_weight(g: &WeightedGraph, side: &[u8]) -> i64 {
    (0..g.len())
        .filter(|&v| side[v] == 0)
        .map(|v| {
            g.edges(v)
                .filter(|&(w, _)| side[w] == 1)
                .map(|(_, ew)| ew)
                .sum::<i64>()
        })
        .sum()
}

/// The last node reached by a BFS from `start` (a pseudo-peripheral node of its component).
fn farthest(g: &WeightedGraph, start: usize) -> usize {
    let mut seen = vec![false; g.len()];
    let mut queue = VecDeque::from([start]);
    seen[start] = true;
    let mut last = start;
    while let Some(u) = queue.pop_front() {
        last = u;
        for (w, _) in g.edges(u) {
            if !seen[w] {
                seen[w] = true;
                queue.push_back(w);
            }
        }
    }
    last
}

/// Greedy graph growing: grows side 0 until its weight reaches `target`, always adding the
/// frontier node whose move reduces the cut most; restarts from a random unassigned node when
/// the frontier is empty (another component).
fn grow(g: &WeightedGraph, target: usize, tiebreak: &[u32], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let n = g.len();
    let mut side = vec![1u8; n];
    // conn[v] = edge weight from v into the region; degree[v] = v's total edge weight.
    let mut conn = vec![0i64; n];
    let degree: Vec<i64> = (0..n).map(|v| g.edges(v).map(|(_, w)| w).sum()).collect();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(rng);
    let mut next_seed = 0usize;
    let mut heap: BinaryHeap<(i64, u32, u32)> = BinaryHeap::new();
    let start = farthest(g, order[0] as usize);
    heap.push((-degree[start], tiebreak[start], start as u32));
    let mut size = 0;
    while size < target {
        let v = match heap.pop() {
            Some((gain, _, v)) => {
                let v = v as usize;
                if side[v] == 0 || gain != 2 * conn[v] - degree[v] {
                    continue;
                }
                v
            }
            None => {
                while next_seed < n && side[order[next_seed] as usize] == 0 {
                    next_seed += 1;
                }
                match order.get(next_seed) {
                    Some(&v) => v as usize,
                    None => break,
                }
            }
        };
        side[v] = 0;
        size += g.node_weights[v] as usize;
        for (w, ew) in g.edges(v) {
            conn[w] += ew;
            if side[w] == 1 {
                heap.push((2 * conn[w] - degree[w], tiebreak[w], w as u32));
            }
        }
    }
    side
}

/// Fiduccia-Mattheyses refinement. Keeps (or brings) side 0's weight within `balance`, then
/// lowers the cut: states are ranked by (balance violation, cut, distance from the target).
fn refine(g: &WeightedGraph, side: &mut [u8], balance: Balance, tiebreak: &[u32]) {
    let n = g.len();
    // gain[v] = (edge weight to the other side) - (to its own side): the cut reduction of moving v.
    let mut gain: Vec<i64> = (0..n)
        .map(|v| {
            g.edges(v)
                .map(|(w, ew)| if side[w] != side[v] { ew } else { -ew })
                .sum()
        })
        .collect();
    let mut size0 = side_weight(g, side);
    let slack = (g.total_weight / 128).clamp(2, 64).max(g.max_node_weight());
    let lo_tmp = balance.lo.saturating_sub(slack);
    let hi_tmp = balance.hi + slack;
    let stall_limit = (100 + n / 100).min(1000);
    let mut locked = vec![false; n];
    let mut moves: Vec<u32> = Vec::new();
    // Lower is better.
    let rank = |size0: usize, cut_delta: i64| {
        (
            balance.violation(size0),
            -cut_delta,
            size0.abs_diff(balance.target),
        )
    };

    for _ in 0..MAX_PASSES {
        let mut heaps: [BinaryHeap<(i64, u32, u32)>; 2] = [BinaryHeap::new(), BinaryHeap::new()];
        for v in 0..n {
            // Boundary nodes, plus isolated nodes: free moves that fix the balance.
            if g.is_isolated(v) || g.edges(v).any(|(w, _)| side[w] != side[v]) {
                heaps[side[v] as usize].push((gain[v], tiebreak[v], v as u32));
            }
        }
        locked.fill(false);
        moves.clear();
        let mut total = 0i64;
        let start_rank = rank(size0, 0);
        let mut best_rank = start_rank;
        let mut best_len = 0usize;
        loop {
            // The valid top of each heap whose move keeps the temporary bounds.
            let mut top: [Option<(i64, usize)>; 2] = [None, None];
            for (s, heap) in heaps.iter_mut().enumerate() {
                while let Some(&(gv, _, v)) = heap.peek() {
                    let v = v as usize;
                    if locked[v] || side[v] as usize != s || gain[v] != gv {
                        heap.pop();
                        continue;
                    }
                    let w = g.node_weights[v] as usize;
                    let allowed = if s == 0 {
                        size0 >= w && size0 - w >= lo_tmp.min(size0)
                    } else {
                        size0 + w <= hi_tmp.max(size0)
                    };
                    // The heaviest side must shed weight first when out of bounds.
                    let forced_ok =
                        (size0 <= balance.hi || s == 0) && (size0 >= balance.lo || s == 1);
                    if allowed && forced_ok {
                        top[s] = Some((gv, v));
                    }
                    break;
                }
            }
            let from = match (top[0], top[1]) {
                (None, None) => break,
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (Some((g0, _)), Some((g1, _))) if g0 != g1 => usize::from(g1 > g0),
                _ => usize::from(size0 <= balance.target),
            };
            let Some((gv, v)) = top[from] else { break };
            heaps[from].pop();
            locked[v] = true;
            move_node(g, side, &mut gain, v);
            let w = g.node_weights[v] as usize;
            if from == 0 {
                size0 -= w;
            } else {
                size0 += w;
            }
            total += gv;
            moves.push(v as u32);
            for (u, _) in g.edges(v) {
                if !locked[u] {
                    heaps[side[u] as usize].push((gain[u], tiebreak[u], u as u32));
                }
            }
            let r = rank(size0, total);
            if r < best_rank {
                best_rank = r;
                best_len = moves.len();
            }
            if moves.len() - best_len > stall_limit {
                break;
            }
        }
        // Undo the moves after the best prefix.
        for &v in moves[best_len..].iter().rev() {
            let v = v as usize;
            let w = g.node_weights[v] as usize;
            if side[v] == 0 {
                size0 -= w;
            } else {
                size0 += w;
            }
            move_node(g, side, &mut gain, v);
        }
        if best_rank >= start_rank {
            break;
        }
    }
}

/// Moves `v` to the other side, updating its and its neighbours' gains.
fn move_node(g: &WeightedGraph, side: &mut [u8], gain: &mut [i64], v: usize) {
    side[v] ^= 1;
    gain[v] = -gain[v];
    for (w, ew) in g.edges(v) {
        // w's edge to v switched between internal and external.
        if side[w] == side[v] {
            gain[w] -= 2 * ew;
        } else {
            gain[w] += 2 * ew;
        }
    }
}

/// Guarantees `balance.lo <= side-0 weight <= balance.hi` for unit node weights by moving the
/// best-gain nodes off the heavy side (normally a no-op after refinement).
fn enforce(g: &WeightedGraph, side: &mut [u8], balance: Balance) {
    let size0 = side_weight(g, side);
    let (from, excess) = if size0 > balance.hi {
        (0u8, size0 - balance.hi)
    } else if size0 < balance.lo {
        (1u8, balance.lo - size0)
    } else {
        return;
    };
    let mut candidates: Vec<(i64, usize)> = (0..g.len())
        .filter(|&v| side[v] == from)
        .map(|v| {
            (
                g.edges(v)
                    .map(|(w, ew)| if side[w] != side[v] { ew } else { -ew })
                    .sum(),
                v,
            )
        })
        .collect();
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    for &(_, v) in candidates.iter().take(excess) {
        side[v] ^= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(graph: &Graph) -> WeightedGraph {
        WeightedGraph::from_graph(graph)
    }

    fn tiebreak(n: usize, seed: u64) -> Vec<u32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| rng.random()).collect()
    }

    #[test]
    fn refinement_lowers_the_cut_within_bounds() {
        let ds = crate::synthetic::CsbmConfig {
            num_nodes: 600,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let g = unit(&ds.graph);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut side: Vec<u8> = (0..600).map(|v| u8::from(v % 2 == 1)).collect();
        side.shuffle(&mut rng);
        let before = cut_weight(&g, &side);
        let balance = Balance {
            target: 300,
            lo: 290,
            hi: 310,
        };
        refine(&g, &mut side, balance, &tiebreak(600, 1));
        let size0 = side_weight(&g, &side);
        assert!((290..=310).contains(&size0), "size0 {size0}");
        let after = cut_weight(&g, &side);
        assert!(after < before * 3 / 4, "cut {before} -> {after}");
    }

    #[test]
    fn refinement_restores_balance_from_an_infeasible_start() {
        let ds = crate::synthetic::CsbmConfig {
            num_nodes: 400,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let g = unit(&ds.graph);
        let mut side: Vec<u8> = (0..400).map(|v| u8::from(v >= 300)).collect();
        let balance = Balance {
            target: 200,
            lo: 200,
            hi: 200,
        };
        refine(&g, &mut side, balance, &tiebreak(400, 2));
        enforce(&g, &mut side, balance);
        assert_eq!(side_weight(&g, &side), 200);
    }

    #[test]
    fn coarsening_preserves_weights_and_cut() {
        let ds = crate::synthetic::CsbmConfig {
            num_nodes: 1000,
            ..Default::default()
        }
        .generate()
        .unwrap();
        let g = unit(&ds.graph);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (coarse, map) = coarsen_once(&g, 4, &tiebreak(1000, 3), &mut rng).unwrap();
        assert!(coarse.len() < 700, "coarsened only to {}", coarse.len());
        assert_eq!(
            coarse
                .node_weights
                .iter()
                .map(|&w| w as usize)
                .sum::<usize>(),
            1000
        );
        assert_eq!(
            coarse
                .edge_weights
                .iter()
                .map(|&w| w as usize)
                .sum::<usize>()
                + {
                    // Edges inside a coarse node disappear.
                    (0..1000)
                        .map(|v| g.edges(v).filter(|&(w, _)| map[w] == map[v]).count())
                        .sum::<usize>()
                },
            g.targets.len()
        );
        // Any coarse bisection has the same cut on the fine graph.
        let coarse_side: Vec<u8> = (0..coarse.len()).map(|c| (c % 3 == 0) as u8).collect();
        let fine_side: Vec<u8> = map.iter().map(|&c| coarse_side[c as usize]).collect();
        assert_eq!(
            cut_weight(&coarse, &coarse_side),
            cut_weight(&g, &fine_side)
        );
    }

    #[test]
    fn sampled_shrink_estimate_is_close_to_the_real_one() {
        for graph in [
            crate::synthetic::CsbmConfig {
                num_nodes: 4000,
                ..Default::default()
            }
            .generate()
            .unwrap()
            .graph,
            crate::synthetic::PowerLawConfig {
                num_nodes: 20_000,
                ..Default::default()
            }
            .generate()
            .unwrap()
            .into(),
        ] {
            let g = unit(&graph);
            let n = g.len();
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let (coarse, map) = coarsen_once(&g, 4, &tiebreak(n, 5), &mut rng).unwrap();
            let mut members = vec![[u32::MAX; 2]; coarse.len()];
            for (v, &c) in map.iter().enumerate() {
                let slot = &mut members[c as usize];
                if slot[0] == u32::MAX {
                    slot[0] = v as u32;
                } else {
                    slot[1] = v as u32;
                }
            }
            let real = coarse.targets.len() as f64 / g.targets.len() as f64;
            let estimate = estimated_shrink(&g, &map, &members, &mut rng);
            assert!(
                (estimate - real).abs() < 0.08,
                "{n} nodes: estimate {estimate:.3}, real {real:.3}"
            );
        }
    }

    #[test]
    fn zero_slack_bisection_finds_the_planted_cut() {
        // Two 100-node cliques joined by a perfect matching, exact 100/100 balance required.
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
        let graph = Graph::from_edges(200, &edges, &GraphOptions::default()).unwrap();
        let g = unit(&graph);
        let (side, _) = bisect(
            &g,
            Balance {
                target: 100,
                lo: 100,
                hi: 100,
            },
            true,
            4,
        );
        assert_eq!(side_weight(&g, &side), 100);
        assert_eq!(cut_weight(&g, &side), 100);
    }
}

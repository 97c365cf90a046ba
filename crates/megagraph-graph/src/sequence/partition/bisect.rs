//! One bisection: multilevel when coarsening pays off, else greedy graph growing from
//! pseudo-peripheral nodes, each refined; and the weights that rank a bisection.

use std::collections::{BinaryHeap, VecDeque};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::balance::{Balance, side_weight};
use super::coarsen::{COARSEN_TO, coarsen_once};
use super::mix;
use super::refine::{enforce, refine};
use super::weighted::WeightedGraph;

/// Greedy-growing starts tried on the coarsest graph.
const INITIAL_TRIES: u64 = 6;
/// Graphs above `2 * COARSEN_TO` nodes with fewer arcs than this get two greedy-growing starts,
/// larger ones one.
const INITIAL_WORK: usize = 400_000;

/// Bisects `g` into side 0 (weight within `balance`) and side 1, minimizing the cut weight,
/// multilevel when `coarsen` (and worthwhile). Returns the side of every node, and whether
/// coarsening paid off (if it did not, deeper levels skip it). Exact bounds hold on return when
/// all node weights are 1.
pub(super) fn bisect(
    g: &WeightedGraph,
    balance: Balance,
    coarsen: bool,
    seed: u64,
) -> (Vec<u8>, bool) {
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

/// Total weight of edges between the two sides.
pub(super) fn cut_weight(g: &WeightedGraph, side: &[u8]) -> i64 {
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

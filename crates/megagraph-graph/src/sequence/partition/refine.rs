//! Fiduccia-Mattheyses refinement of a bisection, and the final step that enforces exact
//! balance bounds.

use std::collections::BinaryHeap;

use super::balance::{Balance, side_weight};
use super::weighted::WeightedGraph;

/// Maximum Fiduccia-Mattheyses passes per level.
const MAX_PASSES: usize = 6;

/// Fiduccia-Mattheyses refinement. Keeps (or brings) side 0's weight within `balance`, then
/// lowers the cut: states are ranked by (balance violation, cut, distance from the target).
pub(super) fn refine(g: &WeightedGraph, side: &mut [u8], balance: Balance, tiebreak: &[u32]) {
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
pub(super) fn enforce(g: &WeightedGraph, side: &mut [u8], balance: Balance) {
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

//! Coarsening by heavy-edge matching: merged nodes and edges carry the summed weights.

use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::weighted::WeightedGraph;

/// Coarsening stops at about this many nodes.
pub(super) const COARSEN_TO: usize = 160;
/// The mate of an unmatched node, and the empty member slot of a coarse node.
const UNMATCHED: u32 = u32::MAX;

/// Heavy-edge matching: returns the coarse graph and the coarse node of every node. Nodes are
/// visited in random order and matched with the unmatched neighbour joined by the heaviest edge
/// (merged weight at most `max_weight`); isolated nodes are paired with each other. Rows of the
/// coarse graph are built in parallel.
///
/// On graphs of at least [`SAMPLE_MIN_ARCS`] arcs, the share of arcs the coarse graph keeps
/// is first estimated from [`SHRINK_SAMPLES`] arcs drawn at random (each gives its coarse
/// node's merged-row / fine-row length ratio, an unbiased estimate); above
/// [`SKIP_SHRINK_RATIO`] the graph is not built and `None` is returned.
pub(super) fn coarsen_once(
    g: &WeightedGraph,
    max_weight: usize,
    tiebreak: &[u32],
    rng: &mut ChaCha8Rng,
) -> Option<(WeightedGraph, Vec<u32>)> {
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
    let members = coarse_members(&map, cn);
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

/// The members of each of the `count` coarse nodes of `map` (the coarse node of every node),
/// [`UNMATCHED`] in the second slot of a coarse node of one member.
pub(super) fn coarse_members(map: &[u32], count: usize) -> Vec<[u32; 2]> {
    let mut members = vec![[UNMATCHED; 2]; count];
    for (v, &c) in map.iter().enumerate() {
        let slot = &mut members[c as usize];
        if slot[0] == UNMATCHED {
            slot[0] = v as u32;
        } else {
            slot[1] = v as u32;
        }
    }
    members
}

/// Graphs with at least this many arcs estimate the coarse arc count before building it.
const SAMPLE_MIN_ARCS: usize = 1 << 22;
/// Arcs sampled by [`estimated_shrink`].
const SHRINK_SAMPLES: usize = 256;
/// Coarse graphs estimated to keep more than this share of the arcs are not built (the exact
/// threshold of `bisect` is 0.9; the margin covers the sampling error).
const SKIP_SHRINK_RATIO: f64 = 0.96;

/// Estimated `coarse arcs / fine arcs` of the matching `map` (see [`coarsen_once`]).
pub(super) fn estimated_shrink(
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
        for &u in members[c as usize].iter().filter(|&&u| u != UNMATCHED) {
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

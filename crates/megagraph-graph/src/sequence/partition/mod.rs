//! Size-capped graph partitioning by multilevel recursive bisection.
//!
//! To split `n` nodes into `k = ceil(n / cap)` parts, a node set is bisected into sides that
//! will hold `ceil(k / 2)` and `floor(k / 2)` parts, side 0's size kept within `[lo, hi]` so
//! both sides fit their parts; both halves then recurse (in parallel for large sets).
//!
//! Each bisection is multilevel, in the manner of METIS: the subgraph is coarsened by
//! heavy-edge matching (merged nodes and edges carry weights) down to about
//! [`coarsen::COARSEN_TO`] nodes; the coarsest graph is bisected by greedy graph growing from a
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

mod balance;
mod bisect;
mod coarsen;
mod refine;
mod splitter;
#[cfg(test)]
mod tests;
mod weighted;

use crate::graph::{Graph, GraphOptions, SelfLoops};
use splitter::Splitter;
use weighted::WeightedGraph;

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
    crate::hash::splitmix64(seed ^ salt.wrapping_mul(crate::hash::GOLDEN))
}

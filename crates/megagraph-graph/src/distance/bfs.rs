//! The bounded breadth-first search behind every row of a distance index.

use super::{BfsBudget, DistanceQuery, DistanceScope, DistanceWorkspace, MAX_DISTANCE_LIMIT};
use crate::error::GraphError;
use crate::graph::Graph;

/// What one bounded BFS (one row of an index) explores: paths of up to `max_distance` arcs
/// through the nodes `scope` allows, within `budget`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bfs {
    /// The longest distance stored exactly (farther pairs read as the far bucket).
    pub(super) max_distance: u8,
    /// Where paths may run.
    scope: DistanceScope,
    /// The cap on the adjacency entries one BFS examines.
    budget: BfsBudget,
}

impl Bfs {
    /// The BFS that answers `query`.
    ///
    /// # Errors
    /// [`GraphError::MaxDistanceTooLarge`] if `query.max_distance > MAX_DISTANCE_LIMIT`.
    pub(super) fn new(query: DistanceQuery) -> Result<Self, GraphError> {
        let DistanceQuery {
            max_distance,
            scope,
            budget,
        } = query;
        if max_distance > MAX_DISTANCE_LIMIT {
            return Err(GraphError::MaxDistanceTooLarge { max_distance });
        }
        Ok(Self {
            max_distance,
            scope,
            budget,
        })
    }

    /// [`Bfs::new`] for the exact query ([`DistanceQuery::exact`]).
    ///
    /// # Errors
    /// As [`Bfs::new`].
    pub(super) fn exact(max_distance: u8, scope: DistanceScope) -> Result<Self, GraphError> {
        Self::new(DistanceQuery::exact(max_distance, scope))
    }

    /// The bucket of the pairs farther than `max_distance`, or unreachable.
    pub(super) fn far_bucket(&self) -> u8 {
        self.max_distance + 1
    }
}

/// Checks the workspace's size and the node list, and registers `nodes` as the current sequence
/// members of `ws` (at their positions), ready for [`bfs_visit`].
///
/// # Errors
/// [`GraphError::InvalidConfig`] (workspace of another node count),
/// [`GraphError::NodeOutOfRange`], [`GraphError::DuplicateNode`].
pub(super) fn prepare_sequence(
    graph: &Graph,
    nodes: &[u32],
    ws: &mut DistanceWorkspace,
) -> Result<(), GraphError> {
    let n = graph.num_nodes();
    if ws.num_nodes() != n {
        return Err(GraphError::InvalidConfig {
            field: "workspace",
            value: ws.num_nodes().to_string(),
            reason: "a workspace must be created for the graph's node count",
        });
    }
    ws.members.clear();
    for (i, &v) in nodes.iter().enumerate() {
        if v as usize >= n {
            return Err(GraphError::NodeOutOfRange {
                node: u64::from(v),
                num_nodes: n,
                position: i,
            });
        }
        if ws.members.contains(v) {
            return Err(GraphError::DuplicateNode {
                node: v,
                first: ws.position[v as usize] as usize,
                second: i,
            });
        }
        ws.members.insert(v);
        ws.position[v as usize] = i as u32;
    }
    Ok(())
}

/// `bfs` from `source` over the members registered by [`prepare_sequence`], calling
/// `visit(position, depth)` once for every other member reached (depth `1..=max_distance`, in
/// nondecreasing depth order; never for `source` itself); stops once `targets` other members are
/// found, or once the budget's adjacency entries were examined (see [`BfsBudget`]). Returns
/// whether the budget stopped it. Costs `O(arcs examined)`, never `O(N)`.
pub(super) fn bfs_visit(
    graph: &Graph,
    source: u32,
    bfs: Bfs,
    ws: &mut DistanceWorkspace,
    targets: usize,
    mut visit: impl FnMut(usize, u8),
) -> bool {
    if targets == 0 || bfs.max_distance == 0 {
        return false;
    }
    let Bfs {
        max_distance,
        scope,
        budget,
    } = bfs;
    ws.visited.clear();
    ws.visited.insert(source);
    let mut frontier = std::mem::take(&mut ws.frontier);
    let mut next = std::mem::take(&mut ws.next);
    frontier.clear();
    frontier.push(source);
    let mut found = 0usize;
    let mut left = budget.max_arcs_per_source.unwrap_or(usize::MAX);
    let mut truncated = false;
    'levels: for depth in 1..=max_distance {
        next.clear();
        // Nodes first found at the last level are never expanded: only members matter there.
        let last = depth == max_distance;
        for &u in &frontier {
            let all = graph.neighbors(u);
            let row = if all.len() > left {
                truncated = true;
                &all[..left]
            } else {
                all
            };
            left -= row.len();
            for &w in row {
                if ws.visited.contains(w) {
                    continue;
                }
                let pos = ws.position_of(w);
                if pos.is_none() && (last || scope == DistanceScope::Induced) {
                    continue;
                }
                ws.visited.insert(w);
                if let Some(p) = pos {
                    visit(p, depth);
                    found += 1;
                    if found == targets {
                        // Every target is found: nothing was lost, whatever the budget.
                        truncated = false;
                        break 'levels;
                    }
                }
                if !last {
                    next.push(w);
                }
            }
            if truncated {
                break 'levels;
            }
        }
        if next.is_empty() {
            break;
        }
        std::mem::swap(&mut frontier, &mut next);
    }
    ws.frontier = frontier;
    ws.next = next;
    truncated
}

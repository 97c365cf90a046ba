//! [`DistanceWorkspace`]: the per-thread scratch memory of distance computations.

/// Reusable scratch memory for distance computations on one graph: per-node stamp arrays, so a
/// BFS costs `O(visited)` rather than `O(N)`. One per thread.
#[derive(Debug, Clone)]
pub struct DistanceWorkspace {
    /// The nodes visited by the current BFS.
    pub(super) visited: StampSet,
    /// The nodes of the current sequence, `v` at `position[v]`.
    pub(super) members: StampSet,
    pub(super) position: Vec<u32>,
    pub(super) frontier: Vec<u32>,
    pub(super) next: Vec<u32>,
    /// `(position, bucket)` pairs of the sparse row being built.
    pub(super) row_entries: Vec<(u32, u8)>,
}

impl DistanceWorkspace {
    /// Scratch memory for a graph of `num_nodes` nodes (three zeroed `u32` arrays of that
    /// length; the pages are touched only where a BFS goes).
    pub fn new(num_nodes: usize) -> Self {
        Self {
            visited: StampSet::new(num_nodes),
            members: StampSet::new(num_nodes),
            position: vec![0; num_nodes],
            frontier: Vec::new(),
            next: Vec::new(),
            row_entries: Vec::new(),
        }
    }

    /// The node count of the graph the workspace is for.
    pub(super) fn num_nodes(&self) -> usize {
        self.position.len()
    }

    /// The sequence position of `v` if it is a member of the current sequence.
    pub(super) fn position_of(&self, v: u32) -> Option<usize> {
        self.members
            .contains(v)
            .then(|| self.position[v as usize] as usize)
    }
}

/// A set of nodes `0..N` emptied in `O(1)`: `v` is in it when `stamps[v] == round`.
#[derive(Debug, Clone)]
pub(super) struct StampSet {
    stamps: Vec<u32>,
    round: u32,
}

impl StampSet {
    /// An empty set of nodes `0..num_nodes`.
    fn new(num_nodes: usize) -> Self {
        Self {
            stamps: vec![0; num_nodes],
            round: 0,
        }
    }

    /// Empties the set (a new round; the stamps are zeroed once every `u32::MAX` rounds).
    pub(super) fn clear(&mut self) {
        if self.round == u32::MAX {
            self.stamps.fill(0);
            self.round = 0;
        }
        self.round += 1;
    }

    /// Adds `v`.
    pub(super) fn insert(&mut self, v: u32) {
        self.stamps[v as usize] = self.round;
    }

    /// Whether `v` is in the set.
    pub(super) fn contains(&self, v: u32) -> bool {
        self.stamps[v as usize] == self.round
    }
}

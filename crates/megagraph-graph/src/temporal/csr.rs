//! [`TemporalCsr`]: per node, its interactions `(neighbour, event id, time)` sorted by time.

use serde::{Deserialize, Serialize};

use super::events::EventStream;

/// Which endpoints of an event see it as a neighbour entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EventDirection {
    /// Both endpoints: `src` gets `(dst, e, t)` and `dst` gets `(src, e, t)` (TGL's default).
    /// A self-loop event is listed once.
    #[default]
    Undirected,
    /// Only the source: `src` gets `(dst, e, t)`.
    Outgoing,
}

/// A time-ordered CSR over the events of a stream: node `v`'s entries are
/// `offsets[v]..offsets[v + 1]` of `neighbors`, `event_ids` and `times`, sorted by time (ties
/// by event id).
#[derive(Debug, Clone, PartialEq)]
pub struct TemporalCsr {
    offsets: Vec<usize>,
    neighbors: Vec<u32>,
    event_ids: Vec<u32>,
    times: Vec<f64>,
}

impl TemporalCsr {
    /// Builds the CSR of all events of `stream` (`O(nodes + events)`, a counting sort; the
    /// stream's time order makes every node's entries time-sorted).
    pub fn new(stream: &EventStream, direction: EventDirection) -> TemporalCsr {
        let n = stream.num_nodes();
        let (src, dst) = (stream.src(), stream.dst());
        let reverse = |e: usize| direction == EventDirection::Undirected && src[e] != dst[e];
        let mut offsets = vec![0usize; n + 1];
        for e in 0..stream.len() {
            offsets[src[e] as usize + 1] += 1;
            if reverse(e) {
                offsets[dst[e] as usize + 1] += 1;
            }
        }
        for v in 0..n {
            offsets[v + 1] += offsets[v];
        }
        let total = offsets[n];
        let mut neighbors = vec![0u32; total];
        let mut event_ids = vec![0u32; total];
        let mut times = vec![0f64; total];
        let mut next = offsets[..n].to_vec();
        let time = stream.time();
        let mut push = |node: u32, other: u32, e: usize| {
            let slot = &mut next[node as usize];
            neighbors[*slot] = other;
            event_ids[*slot] = e as u32;
            times[*slot] = time[e];
            *slot += 1;
        };
        for e in 0..stream.len() {
            push(src[e], dst[e], e);
            if reverse(e) {
                push(dst[e], src[e], e);
            }
        }
        TemporalCsr {
            offsets,
            neighbors,
            event_ids,
            times,
        }
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Total number of entries (events, twice for undirected non-self-loop events).
    pub fn num_entries(&self) -> usize {
        self.neighbors.len()
    }

    /// Number of entries of `node` (all times). Panics if `node >= num_nodes()`.
    pub fn degree(&self, node: u32) -> usize {
        self.range(node).len()
    }

    /// Neighbours of `node`, time-sorted. Panics if `node >= num_nodes()`.
    pub fn neighbors(&self, node: u32) -> &[u32] {
        &self.neighbors[self.range(node)]
    }

    /// Event ids of `node`'s entries, time-sorted. Panics if `node >= num_nodes()`.
    pub fn event_ids(&self, node: u32) -> &[u32] {
        &self.event_ids[self.range(node)]
    }

    /// Times of `node`'s entries, non-decreasing. Panics if `node >= num_nodes()`.
    pub fn times(&self, node: u32) -> &[f64] {
        &self.times[self.range(node)]
    }

    /// Number of `node`'s entries strictly before `time` (they are the first ones): a binary
    /// search, `O(log degree)`. Panics if `node >= num_nodes()`.
    pub fn count_before(&self, node: u32, time: f64) -> usize {
        self.times(node).partition_point(|&t| t < time)
    }

    fn range(&self, node: u32) -> std::ops::Range<usize> {
        let v = node as usize;
        self.offsets[v]..self.offsets[v + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> EventStream {
        // Events: 0: 0-1 @1, 1: 2-1 @2, 2: 1-1 @2 (self loop), 3: 0-2 @5.
        EventStream::new(
            4,
            vec![0, 2, 1, 0],
            vec![1, 1, 1, 2],
            vec![1.0, 2.0, 2.0, 5.0],
            vec![0; 4],
        )
        .unwrap()
    }

    #[test]
    fn undirected_lists_both_endpoints_in_time_order() {
        let csr = TemporalCsr::new(&stream(), EventDirection::Undirected);
        assert_eq!(csr.num_nodes(), 4);
        assert_eq!(csr.num_entries(), 7);
        assert_eq!(csr.neighbors(0), &[1, 2]);
        assert_eq!(csr.event_ids(0), &[0, 3]);
        assert_eq!(csr.neighbors(1), &[0, 2, 1]);
        assert_eq!(csr.event_ids(1), &[0, 1, 2]);
        assert_eq!(csr.times(1), &[1.0, 2.0, 2.0]);
        assert_eq!(csr.neighbors(2), &[1, 0]);
        assert_eq!(csr.degree(3), 0);
        assert_eq!(csr.count_before(1, 2.0), 1);
        assert_eq!(csr.count_before(1, 2.5), 3);
        assert_eq!(csr.count_before(0, 1.0), 0);
    }

    #[test]
    fn outgoing_lists_sources_only() {
        let csr = TemporalCsr::new(&stream(), EventDirection::Outgoing);
        assert_eq!(csr.num_entries(), 4);
        assert_eq!(csr.neighbors(0), &[1, 2]);
        assert_eq!(csr.neighbors(1), &[1]);
        assert_eq!(csr.neighbors(2), &[1]);
    }
}

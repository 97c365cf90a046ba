//! A batch of events made ready for a model on the CPU: roots, sampled hops and snapshots.

use std::ops::Range;

use megagraph_graph::temporal::{EventStream, SampledHop, TemporalCsr, TemporalSampler};

use crate::error::Result;

/// Which neighbourhood a model reads besides its roots.
#[derive(Debug)]
pub enum Neighbourhood {
    /// None: the identity embeddings (JODIE, APAN).
    Roots,
    /// Sampled hops for temporal graph attention (TGN, TGAT).
    Hops(TemporalSampler),
    /// DySAT's snapshots: the `fanout` most recent neighbours in each of `count` windows of
    /// `span` time units before the root's time.
    Snapshots {
        /// The time-ordered adjacency.
        csr: TemporalCsr,
        /// Snapshots read, the latest ending just before the root's time.
        count: usize,
        /// Length of one snapshot in the stream's time unit.
        span: f64,
        /// Neighbours kept per snapshot.
        fanout: usize,
    },
}

/// The neighbours of each root in each snapshot: `[roots, count, fanout]` row-major, valid
/// entries oldest first, then padding (`mask` false, node 0).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledSnapshots {
    /// Snapshots per root.
    pub count: usize,
    /// Neighbour slots per snapshot.
    pub fanout: usize,
    /// Neighbour ids.
    pub neighbors: Vec<u32>,
    /// `true` for real neighbours.
    pub mask: Vec<bool>,
}

/// One batch of events with its negatives and sampled neighbourhood, as plain data.
///
/// Roots are `[src (events) ; dst (events) ; negatives (events · num_negatives, event-major)]`,
/// each read at its event's time: the layout [`TemporalBatch`](megagraph_models::temporal::TemporalBatch) expects.
#[derive(Debug, Clone)]
pub struct PreparedBatch {
    /// The events, as indices into the stream, in time order (consecutive for a batch of one
    /// worker, a shard's events for DepBloom).
    pub events: Vec<usize>,
    /// Negative destinations per event.
    pub num_negatives: usize,
    /// Root node ids.
    pub roots: Vec<u32>,
    /// Root times (the stream's unit).
    pub root_times: Vec<f64>,
    /// Sampled hops (graph attention), level by level.
    pub hops: Vec<SampledHop>,
    /// Snapshots (DySAT).
    pub snapshots: Option<SampledSnapshots>,
}

impl PreparedBatch {
    /// Number of positive events.
    pub fn num_events(&self) -> usize {
        self.events.len()
    }

    /// The nodes whose memory the batch reads: its roots and sampled neighbours (padding
    /// included), repeats kept.
    pub(crate) fn memory_reads(&self) -> impl Iterator<Item = usize> + '_ {
        let hops = self.hops.iter().flat_map(|hop| hop.neighbors.iter());
        self.roots.iter().chain(hops).map(|&node| node as usize)
    }
}

impl Neighbourhood {
    /// Prepares the events `events` of `stream` with `negatives` (`[events, num_negatives]`
    /// row-major); `key` seeds uniform sampling and must differ between batches.
    pub fn prepare(
        &self,
        stream: &EventStream,
        events: Range<usize>,
        negatives: &[u32],
        num_negatives: usize,
        key: u64,
    ) -> Result<PreparedBatch> {
        self.prepare_events(stream, events.collect(), negatives, num_negatives, key)
    }

    /// [`prepare`](Self::prepare) for any events of `stream` in time order.
    pub fn prepare_events(
        &self,
        stream: &EventStream,
        events: Vec<usize>,
        negatives: &[u32],
        num_negatives: usize,
        key: u64,
    ) -> Result<PreparedBatch> {
        let column = |values: &[u32]| events.iter().map(|&e| values[e]).collect::<Vec<u32>>();
        let (src, dst) = (column(stream.src()), column(stream.dst()));
        let time: Vec<f64> = events.iter().map(|&e| stream.time()[e]).collect();
        let (src, dst, time) = (&src[..], &dst[..], &time[..]);
        let mut roots = Vec::with_capacity(events.len() * (2 + num_negatives));
        roots.extend_from_slice(src);
        roots.extend_from_slice(dst);
        roots.extend_from_slice(negatives);
        let mut root_times = Vec::with_capacity(roots.len());
        root_times.extend_from_slice(time);
        root_times.extend_from_slice(time);
        for &t in time {
            root_times.extend(std::iter::repeat_n(t, num_negatives));
        }
        let (hops, snapshots) = match self {
            Neighbourhood::Roots => (Vec::new(), None),
            Neighbourhood::Hops(sampler) => (sampler.sample(&roots, &root_times, key)?, None),
            Neighbourhood::Snapshots { csr, count, span, fanout } => {
                (Vec::new(), Some(snapshots(csr, &roots, &root_times, *count, *span, *fanout)))
            }
        };
        Ok(PreparedBatch {
            events,
            num_negatives,
            roots,
            root_times,
            hops,
            snapshots,
        })
    }
}

/// The `fanout` most recent neighbours of each root in each of `count` windows
/// `[t − (count − s)·span, t − (count − s − 1)·span)`, `s = 0` the oldest.
fn snapshots(
    csr: &TemporalCsr,
    roots: &[u32],
    times: &[f64],
    count: usize,
    span: f64,
    fanout: usize,
) -> SampledSnapshots {
    let slots = roots.len() * count * fanout;
    let (mut neighbors, mut mask) = (vec![0u32; slots], vec![false; slots]);
    for (r, (&root, &t)) in roots.iter().zip(times).enumerate() {
        let adjacent = csr.neighbors(root);
        for s in 0..count {
            let end_time = t - (count - s - 1) as f64 * span;
            let start_time = end_time - span;
            let end = csr.count_before(root, end_time);
            let start = csr.count_before(root, start_time).max(end.saturating_sub(fanout));
            let base = (r * count + s) * fanout;
            for (slot, entry) in (start..end).enumerate() {
                neighbors[base + slot] = adjacent[entry];
                mask[base + slot] = true;
            }
        }
    }
    SampledSnapshots {
        count,
        fanout,
        neighbors,
        mask,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_graph::temporal::EventDirection;

    #[test]
    fn roots_are_sources_destinations_then_negatives_at_their_event_time() {
        let stream = EventStream::new(5, vec![0, 1, 2], vec![3, 4, 3], vec![1.0, 2.0, 3.0], vec![0; 3])
            .unwrap_or_else(|err| panic!("{err}"));
        let batch = Neighbourhood::Roots
            .prepare(&stream, 1..3, &[0, 2, 1, 1], 2, 0)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(batch.roots, vec![1, 2, 4, 3, 0, 2, 1, 1]);
        assert_eq!(batch.root_times, vec![2.0, 3.0, 2.0, 3.0, 2.0, 2.0, 3.0, 3.0]);
        assert_eq!(batch.num_events(), 2);
    }

    #[test]
    fn snapshots_hold_the_latest_neighbours_of_each_window_and_never_the_future() {
        // node 0 meets 1..=6 at times 1..=6
        let n = 6;
        let stream = EventStream::new(
            n + 1,
            vec![0; n],
            (1..=n as u32).collect(),
            (1..=n).map(|t| t as f64).collect(),
            vec![0; n],
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let csr = TemporalCsr::new(&stream, EventDirection::Undirected);
        // root 0 at time 6: windows [2, 4) and [4, 6), two slots each
        let got = snapshots(&csr, &[0], &[6.0], 2, 2.0, 2);
        assert_eq!(got.neighbors, vec![2, 3, 4, 5]);
        assert_eq!(got.mask, vec![true; 4]);
        // root 0 at time 3.5 with a span of 1: windows [1.5, 2.5) and [2.5, 3.5), one slot each
        let got = snapshots(&csr, &[0], &[3.5], 2, 1.0, 2);
        assert_eq!(got.neighbors, vec![2, 0, 3, 0]);
        assert_eq!(got.mask, vec![true, false, true, false]);
    }
}

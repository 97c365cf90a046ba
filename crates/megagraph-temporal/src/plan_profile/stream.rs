//! What the planner's profile reads from the event stream alone: the intra-chunk dependency
//! ratio of a batching, and the sharding statistics of a window size.

use std::collections::HashSet;
use std::ops::Range;

use megagraph_graph::temporal::{EventStream, ShardStrategy, TemporalError, WindowShards};
use megagraph_planner::temporal::WindowSample;

use crate::batches::batches;

/// The share of the events of `range`, cut into batches of `batch` events and each batch into
/// `refine` chronological chunks of `ceil(batch / refine)` events, with an endpoint that an
/// earlier event of the same chunk touched: events that read memory their own chunk has
/// already changed (0 for an empty range).
pub(crate) fn dependency_ratio(stream: &EventStream, range: Range<usize>, batch: usize, refine: usize) -> f64 {
    let chunk = batch.div_ceil(refine.max(1)).max(1);
    let (src, dst) = (stream.src(), stream.dst());
    let mut dependent = 0usize;
    let mut seen = HashSet::new();
    for batch in batches(range.clone(), batch) {
        for chunk in batches(batch, chunk) {
            seen.clear();
            for event in chunk {
                let (s, d) = (src[event], dst[event]);
                if seen.contains(&s) || seen.contains(&d) {
                    dependent += 1;
                }
                seen.insert(s);
                seen.insert(d);
            }
        }
    }
    if range.is_empty() {
        0.0
    } else {
        dependent as f64 / range.len() as f64
    }
}

/// The statistics of windows of `window` events over `stream`, sharded over `workers` by
/// topology as DepBloom's training shards them (partitioner seed `seed`): the cross-shard
/// event ratio, the largest shard over the mean one averaged over the windows, and the
/// distinct nodes a window touches, averaged.
///
/// # Errors
///
/// As [`WindowShards::build`]: `workers` or `window` of 0.
pub(crate) fn window_sample(
    stream: &EventStream,
    workers: usize,
    window: usize,
    seed: u64,
) -> Result<WindowSample, TemporalError> {
    let shards = WindowShards::build(stream, workers, window, ShardStrategy::Topology, seed)?;
    let filled: Vec<_> = shards.windows.iter().filter(|w| w.end > w.start).collect();
    let count = filled.len().max(1) as f64;
    let imbalance = filled
        .iter()
        .map(|w| {
            let largest = w.shard_sizes(workers).into_iter().max().unwrap_or(0);
            largest as f64 * workers as f64 / (w.end - w.start) as f64
        })
        .sum::<f64>()
        / count;
    let nodes = filled.iter().map(|w| w.node_owner.len() as f64).sum::<f64>() / count;
    Ok(WindowSample {
        window,
        cross_shard_ratio: shards.cross_shard_ratio(stream),
        imbalance: imbalance.clamp(1.0, workers as f64),
        nodes_per_window: nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(pairs: &[(u32, u32)]) -> EventStream {
        let (src, dst): (Vec<u32>, Vec<u32>) = pairs.iter().copied().unzip();
        let time = (0..pairs.len()).map(|t| t as f64).collect();
        EventStream::new(8, src, dst, time, vec![0; pairs.len()]).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn dependency_counts_events_that_meet_a_node_earlier_in_their_chunk() {
        // one chunk: events 1 (node 0 again), 2 and 3 (node 2 again) and 5 (node 4 again)
        let events = stream(&[(0, 1), (0, 2), (3, 2), (2, 4), (5, 6), (4, 7)]);
        assert_eq!(dependency_ratio(&events, 0..6, 6, 1), 4.0 / 6.0);
        // chunks [0, 1, 2] and [3, 4, 5]: events 1, 2 and 5
        assert_eq!(dependency_ratio(&events, 0..6, 6, 2), 3.0 / 6.0);
        // batches of 2, no refinement: events 1 and 3
        assert_eq!(dependency_ratio(&events, 0..6, 2, 1), 2.0 / 6.0);
        assert_eq!(dependency_ratio(&events, 0..6, 6, 6), 0.0);
        assert_eq!(dependency_ratio(&events, 3..3, 6, 1), 0.0);
    }

    #[test]
    fn a_window_of_disjoint_pairs_has_no_cross_shard_events() {
        let events = stream(&[(0, 1), (2, 3), (0, 1), (2, 3), (4, 5), (6, 7), (4, 5), (6, 7)]);
        let sample = window_sample(&events, 2, 4, 0).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(sample.window, 4);
        assert_eq!(sample.nodes_per_window, 4.0);
        assert_eq!(sample.cross_shard_ratio, 0.0);
        assert!((1.0..=2.0).contains(&sample.imbalance));
        assert!(window_sample(&events, 0, 4, 0).is_err());
    }
}

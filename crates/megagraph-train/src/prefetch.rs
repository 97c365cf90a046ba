//! [`RowPrefetcher`]: distance rows built on a background thread a bounded number of batches
//! ahead of the step that reads them.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use megagraph_graph::SparseDistanceIndex;

/// How a training step reads a batch's distance rows: the context-parallel blocks each sequence
/// is cut into, and how many pipeline stages read each block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// Context-parallel ranks: each sequence's rows are read as `cp` blocks.
    pub cp: usize,
    /// Readers of each block (the pipeline stages, which all attend over the same rows).
    pub readers: usize,
}

impl RowLayout {
    /// One device: every sequence's rows as one block, read once.
    pub const SINGLE: Self = Self { cp: 1, readers: 1 };
}

/// The rows `rows` of sequence `sequence` (rows clipped to the sequence).
pub(crate) type RowKey = (usize, usize, usize);

/// Builds the distance rows of a sequence's members.
pub(crate) type RowBuilder = dyn Fn(&[u32], Range<usize>) -> SparseDistanceIndex + Send + Sync;

/// One block of rows: waiting for the worker, being built, or built.
enum Slot {
    Queued(Vec<u32>),
    Building,
    Ready(Arc<SparseDistanceIndex>),
}

struct Entry {
    slot: Slot,
    /// Reads still expected; the entry is dropped after the last.
    reads_left: usize,
}

#[derive(Default)]
struct State {
    entries: HashMap<RowKey, Entry>,
    /// Keys in the order they were asked for (the worker builds, and eviction drops, the oldest
    /// first); may name keys already read.
    order: VecDeque<RowKey>,
    /// Set when the prefetcher is dropped: the worker stops.
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signals a queued block (to the worker) and a finished one (to readers).
    changed: Condvar,
    build: Arc<RowBuilder>,
    hits: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // a panic while holding the lock leaves the map consistent (every update is one step)
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Distance rows built ahead on one background thread (whose builds are parallel over rows on
/// rayon's pool), so the index of the next batches is ready when a step asks for it.
///
/// Bounded: it holds at most the blocks of the batches it was last asked for plus those of one
/// more batch (the one being read); older blocks are dropped unread and built again on demand.
/// A read of a block that was never asked for, or was dropped, returns `None` and the caller
/// builds it itself, so prefetching never changes results, only when the work is done.
pub(crate) struct RowPrefetcher {
    shared: Arc<Shared>,
    worker: OnceLock<()>,
}

impl RowPrefetcher {
    /// A prefetcher building rows with `build` (no thread starts before the first request).
    pub fn new(build: Arc<RowBuilder>) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                build,
                hits: AtomicU64::new(0),
            }),
            worker: OnceLock::new(),
        }
    }

    /// Queues `blocks` (key and the sequence's members) to be built, each to be read `readers`
    /// times; blocks already held are kept. Keeps at most `capacity` blocks, dropping the
    /// oldest.
    pub fn request(&self, blocks: Vec<(RowKey, Vec<u32>)>, readers: usize, capacity: usize) {
        self.start_worker();
        let mut state = self.shared.lock();
        for (key, members) in blocks {
            if state.entries.contains_key(&key) {
                continue;
            }
            state.entries.insert(
                key,
                Entry {
                    slot: Slot::Queued(members),
                    reads_left: readers.max(1),
                },
            );
            state.order.push_back(key);
        }
        while state.entries.len() > capacity {
            let Some(oldest) = state.order.pop_front() else {
                break;
            };
            state.entries.remove(&oldest);
        }
        // keys already read or dropped need no place in the queue
        let State { entries, order, .. } = &mut *state;
        order.retain(|key| entries.contains_key(key));
        drop(state);
        self.shared.changed.notify_all();
    }

    /// The block `key` if it was asked for: built by the worker (waiting for it if it is being
    /// built), or built now by this thread if the worker has not started it. `None` when it was
    /// never asked for or was dropped.
    pub fn take(&self, key: RowKey) -> Option<Arc<SparseDistanceIndex>> {
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            let entry = state.entries.get_mut(&key)?;
            match &mut entry.slot {
                Slot::Ready(rows) => {
                    let rows = rows.clone();
                    entry.reads_left -= 1;
                    if entry.reads_left == 0 {
                        state.entries.remove(&key);
                    }
                    shared.hits.fetch_add(1, Ordering::Relaxed);
                    return Some(rows);
                }
                Slot::Building => {
                    state = shared
                        .changed
                        .wait(state)
                        .unwrap_or_else(|p| p.into_inner())
                }
                Slot::Queued(members) => {
                    // the worker is behind: build it here rather than wait for its queue
                    let members = std::mem::take(members);
                    entry.slot = Slot::Building;
                    drop(state);
                    let rows = Arc::new((shared.build)(&members, key.1..key.2));
                    state = shared.lock();
                    let kept = finish(&mut state, key, rows.clone());
                    shared.changed.notify_all();
                    if !kept {
                        // dropped while this thread built it: the rows are still this read's
                        return Some(rows);
                    }
                }
            }
        }
    }

    /// Reads of asked-for blocks so far (built by the worker, or by a reader that found one
    /// still queued).
    pub fn hits(&self) -> u64 {
        self.shared.hits.load(Ordering::Relaxed)
    }

    fn start_worker(&self) {
        self.worker.get_or_init(|| {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("megagraph-row-prefetch".into())
                .spawn(move || work(&shared));
            if let Err(error) = spawned {
                // reads then build their rows themselves
                log::warn!(
                    "no background thread for distance rows ({error}); building them on demand"
                );
            }
        });
    }
}

impl Drop for RowPrefetcher {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

/// Stores a finished block, unless it was dropped meanwhile; whether it was stored.
fn finish(state: &mut State, key: RowKey, rows: Arc<SparseDistanceIndex>) -> bool {
    match state.entries.get_mut(&key) {
        Some(entry) => {
            entry.slot = Slot::Ready(rows);
            true
        }
        None => false,
    }
}

/// The worker: builds queued blocks oldest first until the prefetcher is dropped.
fn work(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.closed {
            return;
        }
        let next = state.order.iter().copied().find(|key| {
            matches!(
                state.entries.get(key),
                Some(Entry {
                    slot: Slot::Queued(_),
                    ..
                })
            )
        });
        let Some(key) = next else {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let Some(entry) = state.entries.get_mut(&key) else {
            continue;
        };
        let Slot::Queued(members) = std::mem::replace(&mut entry.slot, Slot::Building) else {
            continue;
        };
        drop(state);
        let rows = Arc::new((shared.build)(&members, key.1..key.2));
        state = shared.lock();
        // a block dropped while it was built is not needed any more
        let _ = finish(&mut state, key, rows);
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    use megagraph_graph::distance::DistanceScope;
    use megagraph_graph::graph::{Graph, GraphOptions};

    fn counting_builder() -> (Arc<RowBuilder>, Arc<AtomicUsize>) {
        let graph = Graph::from_edges(
            6,
            &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)],
            &GraphOptions::default(),
        )
        .unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let counter = builds.clone();
        let build: Arc<RowBuilder> = Arc::new(move |members: &[u32], rows: Range<usize>| {
            counter.fetch_add(1, Ordering::SeqCst);
            SparseDistanceIndex::new(&graph, members, rows, 3, DistanceScope::Graph).unwrap()
        });
        (build, builds)
    }

    #[test]
    fn prefetched_blocks_are_built_once_and_read_by_each_reader() {
        let (build, builds) = counting_builder();
        let members: Vec<u32> = (0..6).collect();
        let prefetcher = RowPrefetcher::new(build.clone());
        prefetcher.request(
            vec![((0, 0, 3), members.clone()), ((0, 3, 6), members.clone())],
            2,
            8,
        );
        for key in [(0, 0, 3), (0, 3, 6)] {
            let expected = build(&members, key.1..key.2);
            for _ in 0..2 {
                assert_eq!(*prefetcher.take(key).expect("asked for"), expected);
            }
            // both readers have read it: it is gone
            assert!(prefetcher.take(key).is_none());
        }
        assert_eq!(prefetcher.hits(), 4);
        // two blocks by the prefetcher (or by the reader that found one still queued), two here
        assert_eq!(builds.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn old_blocks_beyond_capacity_are_dropped() {
        let (build, _) = counting_builder();
        let members: Vec<u32> = (0..6).collect();
        let prefetcher = RowPrefetcher::new(build);
        let blocks = (0..5).map(|s| ((s, 0, 6), members.clone())).collect();
        prefetcher.request(blocks, 1, 3);
        assert!(prefetcher.take((0, 0, 6)).is_none());
        assert!(prefetcher.take((1, 0, 6)).is_none());
        for s in 2..5 {
            assert!(prefetcher.take((s, 0, 6)).is_some());
        }
        assert!(prefetcher.take((9, 0, 6)).is_none());
    }
}

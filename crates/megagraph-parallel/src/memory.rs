//! Per-thread memory accounting for measurements: a global allocator that charges every
//! allocation to the thread that made it (until it is freed, by whichever thread), so each
//! rank's worker thread reports its own peak of live bytes.
//!
//! Install it in a binary or bench (not in the library):
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: megagraph_parallel::CountingAllocator = megagraph_parallel::CountingAllocator;
//! ```
//!
//! Each allocation carries a small header naming its thread's counter, so a tensor allocated by
//! one rank and freed by another (an activation sent down the pipeline) is charged to the
//! sender until it is freed. Buffers allocated by a backend's own thread pool are charged to
//! that pool's threads, not to the rank; on the Flex backend a tensor's storage is allocated
//! by the calling thread. The first 255 threads that allocate get their own counter; later
//! threads share counter 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// A [`GlobalAlloc`] over [`System`] that counts live bytes and their peak per thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAllocator;

const SLOTS: usize = 256;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(1);
static LIVE: [AtomicIsize; SLOTS] = [const { AtomicIsize::new(0) }; SLOTS];
static PEAK: [AtomicIsize; SLOTS] = [const { AtomicIsize::new(0) }; SLOTS];

thread_local! {
    /// This thread's counter; 0 until assigned.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's counter (assigned on first use).
fn slot() -> usize {
    SLOT.try_with(|slot| {
        if slot.get() == 0 {
            let next = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
            slot.set(if next < SLOTS { next } else { SLOTS });
        }
        slot.get() % SLOTS
    })
    .unwrap_or(0)
}

/// Bytes in front of every allocation: room for the counter index, keeping the alignment.
fn header(layout: Layout) -> usize {
    layout.align().max(std::mem::size_of::<usize>())
}

/// The layout actually requested from the system.
fn padded(layout: Layout) -> Option<Layout> {
    Layout::from_size_align(layout.size().checked_add(header(layout))?, layout.align()).ok()
}

// SAFETY: every block comes from `System` with a layout of the same alignment and `header`
// more bytes; the pointer handed out is `header` bytes into it, so it is aligned and has room
// for `layout.size()` bytes, and `dealloc` recomputes the same offset and layout from `layout`.
// The bookkeeping only touches atomics and a const-initialized thread-local (no allocation).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(full) = padded(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `full` has a non-zero size (header >= 8).
        let base = unsafe { System.alloc(full) };
        if base.is_null() {
            return base;
        }
        INSTALLED.store(true, Ordering::Relaxed);
        let slot = slot();
        let offset = header(layout);
        // SAFETY: `base` has `offset + size` bytes; the slot is written just before the user
        // pointer, inside the header, at an address aligned for `usize` (offset and the
        // block's alignment are multiples of 8).
        unsafe {
            let user = base.add(offset);
            (user.sub(std::mem::size_of::<usize>()) as *mut usize).write(slot);
            let now = LIVE[slot].fetch_add(layout.size() as isize, Ordering::Relaxed)
                + layout.size() as isize;
            PEAK[slot].fetch_max(now, Ordering::Relaxed);
            user
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(full) = padded(layout) else {
            return;
        };
        let offset = header(layout);
        // SAFETY: `ptr` came from `alloc` with this `layout`, so the block starts `offset`
        // bytes earlier and the slot is stored just before `ptr`.
        unsafe {
            let slot = (ptr.sub(std::mem::size_of::<usize>()) as *const usize).read() % SLOTS;
            LIVE[slot].fetch_sub(layout.size() as isize, Ordering::Relaxed);
            System.dealloc(ptr.sub(offset), full);
        }
    }
}

/// Restarts the calling thread's peak at its current live bytes.
pub fn reset_thread_peak() {
    let slot = slot();
    PEAK[slot].store(LIVE[slot].load(Ordering::Relaxed), Ordering::Relaxed);
}

/// The calling thread's peak of live bytes since the last [`reset_thread_peak`] (or since it
/// started), or `None` when [`CountingAllocator`] is not the global allocator.
pub fn thread_peak_bytes() -> Option<usize> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    Some(PEAK[slot()].load(Ordering::Relaxed).max(0) as usize)
}

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

/// Adds `bytes` (negative: removes) to counter `slot`'s live bytes and raises its peak.
fn count(slot: usize, bytes: isize) {
    let now = LIVE[slot].fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK[slot].fetch_max(now, Ordering::Relaxed);
}

/// Hands out a block `base` of `padded(layout)` bytes from `System`: stores the calling
/// thread's counter in its header and charges `layout.size()` to it. Null stays null.
///
/// # Safety
///
/// `base` is null or a block of `padded(layout)` bytes, aligned to `layout.align()`.
unsafe fn charged(base: *mut u8, layout: Layout) -> *mut u8 {
    if base.is_null() {
        return base;
    }
    INSTALLED.store(true, Ordering::Relaxed);
    let slot = slot();
    // SAFETY: `base` has `header + size` bytes; the slot is written just before the user
    // pointer, inside the header, at an address aligned for `usize` (the header and the
    // block's alignment are multiples of 8).
    unsafe {
        let user = base.add(header(layout));
        (user.sub(std::mem::size_of::<usize>()) as *mut usize).write(slot);
        count(slot, layout.size() as isize);
        user
    }
}

/// The counter stored in the header of `ptr`.
///
/// # Safety
///
/// `ptr` was handed out by [`CountingAllocator`].
unsafe fn slot_of(ptr: *mut u8) -> usize {
    // SAFETY: the slot is stored just before every pointer handed out.
    unsafe { (ptr.sub(std::mem::size_of::<usize>()) as *const usize).read() % SLOTS }
}

// SAFETY: every block comes from `System` with a layout of the same alignment and `header`
// more bytes; the pointer handed out is `header` bytes into it, so it is aligned and has room
// for `layout.size()` bytes, and `dealloc` and `realloc` recompute the same offset and layout
// from `layout` (`realloc` keeps the alignment, so the offset too). The bookkeeping only
// touches atomics and a const-initialized thread-local (no allocation).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(full) = padded(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `full` has a non-zero size (header >= 8); `charged` gets what `System` gave.
        unsafe { charged(System.alloc(full), layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(full) = padded(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as in `alloc`; the system zeroes the block (often for free: fresh pages).
        unsafe { charged(System.alloc_zeroed(full), layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(full) = padded(layout) else {
            return;
        };
        // SAFETY: `ptr` came from `alloc` with this `layout`, so the block starts `header`
        // bytes earlier and the slot is stored just before `ptr`.
        unsafe {
            count(slot_of(ptr), -(layout.size() as isize));
            System.dealloc(ptr.sub(header(layout)), full);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (Some(full), Some(new_full)) = (
            padded(layout),
            Layout::from_size_align(new_size, layout.align())
                .ok()
                .and_then(padded),
        ) else {
            return std::ptr::null_mut();
        };
        let offset = header(layout);
        // SAFETY: `ptr` came from this allocator with `layout`, so its block is `full` at
        // `offset` bytes before it; `System.realloc` keeps the block's first bytes (the header
        // with the slot) and its alignment. On failure the old block is untouched.
        unsafe {
            let slot = slot_of(ptr);
            let base = System.realloc(ptr.sub(offset), full, new_full.size());
            if base.is_null() {
                return base;
            }
            // the block stays charged to the thread that allocated it
            count(slot, new_size as isize - layout.size() as isize);
            base.add(offset)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's live bytes.
    fn live() -> isize {
        LIVE[slot()].load(Ordering::Relaxed)
    }

    #[test]
    fn zeroed_and_reallocated_blocks_are_counted_and_keep_their_bytes() {
        let allocator = CountingAllocator;
        let layout = Layout::from_size_align(1000, 64).unwrap_or_else(|e| panic!("{e}"));
        let before = live();
        // SAFETY: the layout is non-zero; each pointer is used within its size and freed
        // once with its current layout.
        unsafe {
            let ptr = allocator.alloc_zeroed(layout);
            assert!(!ptr.is_null() && ptr.align_offset(64) == 0);
            assert!(std::slice::from_raw_parts(ptr, 1000).iter().all(|&b| b == 0));
            assert_eq!(live() - before, 1000);
            ptr.write_bytes(7, 1000);

            let grown = allocator.realloc(ptr, layout, 100_000);
            assert!(!grown.is_null() && grown.align_offset(64) == 0);
            assert!(std::slice::from_raw_parts(grown, 1000).iter().all(|&b| b == 7));
            assert_eq!(live() - before, 100_000);
            assert!(PEAK[slot()].load(Ordering::Relaxed) - before >= 100_000);

            let grown_layout = Layout::from_size_align(100_000, 64).unwrap_or_else(|e| panic!("{e}"));
            let shrunk = allocator.realloc(grown, grown_layout, 10);
            assert!(std::slice::from_raw_parts(shrunk, 10).iter().all(|&b| b == 7));
            assert_eq!(live() - before, 10);
            allocator.dealloc(shrunk, Layout::from_size_align(10, 64).unwrap_or_else(|e| panic!("{e}")));
        }
        assert_eq!(live(), before);
    }
}

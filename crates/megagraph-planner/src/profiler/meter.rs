//! [`MemoryMeter`]: how the profiler reads memory, with [`ThreadAllocatorMeter`] for CPU
//! backends (the parallel runtime's per-thread accounting).

/// Live and peak bytes of whatever one measurement runs on.
pub trait MemoryMeter {
    /// Whether this meter can measure here (e.g. the counting allocator is installed).
    fn available(&self) -> bool;

    /// Starts a new peak at the current live bytes and returns the live bytes.
    fn reset_peak(&self) -> u64;

    /// The peak of live bytes since the last [`reset_peak`](Self::reset_peak).
    fn peak(&self) -> u64;
}

/// The parallel runtime's accounting: bytes allocated by the calling thread and not yet freed,
/// as counted by [`megagraph_parallel::CountingAllocator`]. That allocator must be the program's
/// `#[global_allocator]`; otherwise [`available`](MemoryMeter::available) is `false`.
///
/// On the Flex backend a tensor's storage is allocated by the thread that calls the op, so this
/// is what a rank of the parallel runtime reports in its
/// [`RankReport::peak_bytes`](megagraph_parallel::RankReport).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadAllocatorMeter;

impl MemoryMeter for ThreadAllocatorMeter {
    fn available(&self) -> bool {
        megagraph_parallel::thread_peak_bytes().is_some()
    }

    fn reset_peak(&self) -> u64 {
        megagraph_parallel::reset_thread_peak();
        megagraph_parallel::thread_peak_bytes().unwrap_or(0) as u64
    }

    fn peak(&self) -> u64 {
        megagraph_parallel::thread_peak_bytes().unwrap_or(0) as u64
    }
}

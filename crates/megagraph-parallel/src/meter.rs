//! [`MemoryMeter`]: how a rank (or the planner's profiler) reads the memory of the work it runs.
//!
//! - [`ThreadAllocatorMeter`] (CPU backends): bytes the calling thread allocated through
//!   [`CountingAllocator`](crate::CountingAllocator) and has not freed.
//! - `CubeMemoryMeter` (features `wgpu` / `cuda`): the CubeCL runtime's own memory statistics
//!   for the calling thread's stream: bytes in use on the device, the peak sampled at each
//!   reading.
//!
//! Both measure per thread, so several ranks sharing one machine or one GPU are measured apart.

/// Live and peak bytes of what the calling thread runs.
///
/// A meter is shared by the threads it measures: every method measures the calling thread.
pub trait MemoryMeter: Send + Sync + std::fmt::Debug {
    /// Whether this meter can measure here (e.g. the counting allocator is installed).
    fn available(&self) -> bool;

    /// Starts a new peak at the current live bytes and returns the live bytes.
    fn reset_peak(&self) -> u64;

    /// The peak of live bytes since the last [`reset_peak`](Self::reset_peak).
    fn peak(&self) -> u64;
}

/// The runtime's CPU accounting: bytes allocated by the calling thread and not yet freed, as
/// counted by [`CountingAllocator`](crate::CountingAllocator). That allocator must be the
/// program's `#[global_allocator]`; otherwise [`available`](MemoryMeter::available) is `false`.
///
/// On the Flex backend a tensor's storage is allocated by the thread that calls the op, so
/// this is a rank's memory; it is what [`RankReport::peak_bytes`](crate::RankReport) holds
/// when [`TrainerOptions::meter`](crate::TrainerOptions) is left unset.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadAllocatorMeter;

impl MemoryMeter for ThreadAllocatorMeter {
    fn available(&self) -> bool {
        crate::thread_peak_bytes().is_some()
    }

    fn reset_peak(&self) -> u64 {
        crate::reset_thread_peak();
        crate::thread_peak_bytes().unwrap_or(0) as u64
    }

    fn peak(&self) -> u64 {
        crate::thread_peak_bytes().unwrap_or(0) as u64
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use cube::CubeMemoryMeter;

/// [`CubeMemoryMeter`] of Burn's `Wgpu` backend (`burn::backend::Wgpu`, with or without fusion).
#[cfg(feature = "wgpu")]
pub type WgpuMemoryMeter = CubeMemoryMeter<megagraph_kernels::backends::WgpuRuntime>;

/// [`CubeMemoryMeter`] of Burn's `Cuda` backend (`burn::backend::Cuda`, with or without fusion).
#[cfg(feature = "cuda")]
pub type CudaMemoryMeter = CubeMemoryMeter<megagraph_kernels::backends::CudaRuntime>;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube {
    use super::MemoryMeter;
    use burn_cubecl::cubecl::Runtime;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    /// Device memory from the CubeCL runtime's statistics (`ComputeClient::memory_usage`),
    /// for GPU backends (and wgpu on a software renderer).
    ///
    /// CubeCL keeps one memory pool per stream and a stream per thread, so, like
    /// [`ThreadAllocatorMeter`](super::ThreadAllocatorMeter), this measures the calling
    /// thread. It counts the bytes **in use** by live tensors (not the pool's reserved pages,
    /// which come in large pages and are kept after use).
    ///
    /// The runtime reports the bytes in use now, not a peak, so the peak is sampled: every
    /// call of [`reset_peak`](MemoryMeter::reset_peak) and [`peak`](MemoryMeter::peak) reads
    /// the bytes in use, and the peak is the largest reading since the reset. A tensor that
    /// lives and dies between two readings is missed; the profiler and the parallel runtime
    /// read after each forward and backward pass, when what a pass keeps is live.
    ///
    /// Work queued by a lazy backend (Burn's fusion) is only counted once submitted: sync the
    /// backend (`B::sync`) before reading, as the profiler and the parallel runtime do.
    #[derive(Debug)]
    pub struct CubeMemoryMeter<R: Runtime> {
        device: R::Device,
        peaks: Mutex<HashMap<ThreadId, u64>>,
    }

    impl<R: Runtime> CubeMemoryMeter<R> {
        /// A meter of `device`'s memory.
        pub fn new(device: &R::Device) -> Self {
            Self {
                device: device.clone(),
                peaks: Mutex::new(HashMap::new()),
            }
        }

        /// Bytes in use by the calling thread's stream, or `None` when the runtime cannot say.
        pub fn in_use(&self) -> Option<u64> {
            match R::client(&self.device).memory_usage() {
                Ok(usage) => Some(usage.bytes_in_use),
                Err(error) => {
                    log::warn!("CubeCL memory statistics unavailable: {error:?}");
                    None
                }
            }
        }

        fn record(&self, reset: bool) -> u64 {
            let now = self.in_use().unwrap_or(0);
            let mut peaks = self
                .peaks
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let peak = peaks.entry(std::thread::current().id()).or_insert(now);
            *peak = if reset { now } else { (*peak).max(now) };
            if reset { now } else { *peak }
        }
    }

    impl<R: Runtime> MemoryMeter for CubeMemoryMeter<R> {
        fn available(&self) -> bool {
            self.in_use().is_some()
        }

        fn reset_peak(&self) -> u64 {
            self.record(true)
        }

        fn peak(&self) -> u64 {
            self.record(false)
        }
    }
}

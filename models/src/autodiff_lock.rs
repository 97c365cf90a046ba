//! One autodiff graph at a time for this crate's tests.
//!
//! Burn 0.21's autodiff server is shared by all threads, and a `backward()` on one thread can
//! free the graph steps another thread is still building, so a leaf reused after an earlier
//! `backward()` silently comes back without a gradient (tracel-ai/burn#5573; seen here about
//! once in 200 runs of the temporal tests, never with the lock). The test harness runs tests on
//! several threads, so every test that builds an `Autodiff` graph holds this lock.

use std::sync::{Mutex, MutexGuard};

static AUTODIFF: Mutex<()> = Mutex::new(());

/// Holds the lock until dropped; a test that panicked while holding it does not poison it.
pub(crate) fn autodiff_lock() -> MutexGuard<'static, ()> {
    AUTODIFF.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

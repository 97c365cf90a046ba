//! The tests of one integration-test binary take turns (each crate's `tests/integration/main.rs`
//! includes this file).
//!
//! Burn's random state (parameter initialization, dropout) is one per backend and process: a test
//! drawing from it between another test's seed and initialization would change that test's
//! parameters. Every test of the binary takes the turn first and holds it while it runs (helpers
//! do not take it again: the lock is not reentrant).

use std::sync::{Mutex, MutexGuard, PoisonError};

static TURN: Mutex<()> = Mutex::new(());

/// The turn of the calling test, held until the guard drops. A test that panicked gives the turn
/// on.
pub(crate) fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

//! The tests of one integration-test binary take turns (each crate's `tests/integration/main.rs`
//! includes this file).
//!
//! Burn's random state (parameter initialization, dropout) is one per backend and process: a test
//! drawing from it between another test's seed and initialization would change that test's
//! parameters. Every test of this binary holds the turn while it runs.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

static TURN: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds the turn (a helper may ask again for it).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// The turn of the calling test, held until the guard drops; a no-op guard when this thread
/// already holds it. A test that panicked gives the turn on.
pub(crate) fn turn() -> Turn {
    if HELD.with(Cell::get) {
        return Turn(None);
    }
    let guard = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD.with(|held| held.set(true));
    Turn(Some(guard))
}

/// The turn of one test (see [`turn`]).
pub(crate) struct Turn(Option<MutexGuard<'static, ()>>);

impl Drop for Turn {
    fn drop(&mut self) {
        if self.0.take().is_some() {
            HELD.with(|held| held.set(false));
        }
    }
}

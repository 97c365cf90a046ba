//! [`Rendezvous`]: a barrier of the workers that any of them can break, so that one worker's
//! failure releases the others instead of leaving them waiting.

use std::sync::{Condvar, Mutex};

/// A reusable barrier of `parties` threads with an abort.
#[derive(Debug)]
pub(crate) struct Rendezvous {
    parties: usize,
    state: Mutex<RendezvousState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct RendezvousState {
    arrived: usize,
    generation: u64,
    aborted: bool,
}

impl Rendezvous {
    /// A barrier of `parties` threads.
    pub fn new(parties: usize) -> Self {
        Self {
            parties,
            state: Mutex::new(RendezvousState::default()),
            changed: Condvar::new(),
        }
    }

    /// Waits until all parties arrived; `false` when the barrier was aborted (before or while
    /// waiting).
    pub fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.aborted {
            return false;
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.changed.notify_all();
            return true;
        }
        let generation = state.generation;
        while state.generation == generation && !state.aborted {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        !state.aborted || state.generation != generation
    }

    /// Releases every waiting party and makes every later wait fail.
    pub fn abort(&self) {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.aborted = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parties_meet_repeatedly_and_an_abort_releases_a_waiter() {
        let barrier = Rendezvous::new(2);
        std::thread::scope(|scope| {
            let other = scope.spawn(|| (0..3).all(|_| barrier.wait()));
            assert!((0..3).all(|_| barrier.wait()));
            assert!(other.join().unwrap_or(false));
        });
        let lonely = Rendezvous::new(2);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| lonely.wait());
            std::thread::sleep(std::time::Duration::from_millis(20));
            lonely.abort();
            assert!(!waiter.join().unwrap_or(true));
        });
        assert!(!lonely.wait());
    }
}

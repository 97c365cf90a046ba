//! [`Lockstep`]: the barrier at which the profiler's copies meet before every timed pass.

use std::sync::{Condvar, Mutex, PoisonError};

/// The meeting point of the profiler's copies before every timed pass: a barrier that a failing
/// copy breaks, releasing every waiter for good, so no copy waits for one that stopped.
pub(super) struct Lockstep {
    copies: usize,
    /// Copies arrived at the current meeting, the meeting's number, and whether it is broken.
    state: Mutex<(usize, u64, bool)>,
    met: Condvar,
}

impl Lockstep {
    pub(super) fn new(copies: usize) -> Self {
        Self {
            copies,
            state: Mutex::new((0, 0, false)),
            met: Condvar::new(),
        }
    }

    /// Waits until every copy arrived (or the barrier is broken).
    pub(super) fn wait(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.2 {
            return;
        }
        let meeting = state.1;
        state.0 += 1;
        if state.0 == self.copies {
            state.0 = 0;
            state.1 += 1;
            self.met.notify_all();
            return;
        }
        while state.1 == meeting && !state.2 {
            state = self.met.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Releases every waiter, now and later.
    pub(super) fn break_up(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).2 = true;
        self.met.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn lockstep_lets_no_copy_pass_before_all_arrive() {
        let lockstep = Lockstep::new(3);
        let passed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                lockstep.wait();
                passed.store(true, Ordering::SeqCst);
                // second meeting
                lockstep.wait();
            });
            scope.spawn(|| {
                lockstep.wait();
                lockstep.wait();
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!passed.load(Ordering::SeqCst), "passed with 2 of 3 copies");
            lockstep.wait();
            lockstep.wait();
        });
        assert!(passed.load(Ordering::SeqCst));
    }

    #[test]
    fn a_broken_lockstep_releases_every_waiter() {
        let lockstep = Lockstep::new(3);
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| lockstep.wait());
            scope.spawn(|| lockstep.wait());
            std::thread::sleep(Duration::from_millis(20));
            lockstep.break_up();
        });
        // and every later meeting passes at once
        lockstep.wait();
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

//! [`DropoutScope`]: a thread's own dropout seeds, keyed by the work being done rather than drawn
//! from the backend's one generator.

use std::cell::Cell;
use std::marker::PhantomData;

use super::PhiloxStream;

thread_local! {
    /// The active scope's stream and the seeds drawn from it so far.
    static ACTIVE: Cell<Option<(PhiloxStream, u64)>> = const { Cell::new(None) };
}

/// While alive, every dropout seed drawn on this thread ([`draw_seed`](super::draw_seed), so
/// every [`FastDropout::forward`](super::FastDropout::forward)) comes from the Philox stream
/// (`seed`, `stream`) in order, draw `k` from block `k`, instead of the backend's generator.
///
/// Burn's CPU backends keep one generator per process. Threads that train at the same time
/// (workers of a mesh on one machine) draw from it in whatever order the scheduler gives them, so
/// their masks, and a run's result, change from run to run. Keying each batch's masks by the
/// batch (`stream`: its epoch and index) makes them a function of the run's seed and the batch
/// alone, whichever thread trains it and whenever. Scopes nest: dropping one restores the
/// enclosing one. A scope belongs to the thread that entered it (it is neither `Send` nor `Sync`).
#[must_use = "the scope ends when this value is dropped"]
#[derive(Debug)]
pub struct DropoutScope {
    /// The scope this one replaced, restored on drop.
    previous: Option<(PhiloxStream, u64)>,
    /// Ties the scope to its thread.
    _thread: PhantomData<*const ()>,
}

impl DropoutScope {
    /// Starts drawing this thread's dropout seeds from the stream (`seed`, `stream`), from its
    /// first block.
    pub fn enter(seed: u64, stream: u64) -> Self {
        let previous = ACTIVE.with(|active| active.replace(Some((PhiloxStream::new(seed, stream), 0))));
        Self {
            previous,
            _thread: PhantomData,
        }
    }
}

impl Drop for DropoutScope {
    fn drop(&mut self) {
        ACTIVE.with(|active| active.set(self.previous));
    }
}

/// The next seed of this thread's active [`DropoutScope`], if one is active.
pub(crate) fn scoped_seed() -> Option<u64> {
    ACTIVE.with(|active| {
        let (stream, drawn) = active.get()?;
        active.set(Some((stream, drawn + 1)));
        let [low, high, _, _] = stream.block(drawn);
        Some(u64::from(high) << 32 | u64::from(low))
    })
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Tensor;

    use super::*;
    use crate::dropout::{FastDropoutConfig, draw_seed};

    type B = Autodiff<Flex>;

    #[test]
    fn a_scope_draws_its_stream_in_order_and_restores_the_enclosing_one() {
        let device = Default::default();
        let stream = PhiloxStream::new(7, 11);
        let seed_of = |block: u64| {
            let [low, high, _, _] = stream.block(block);
            u64::from(high) << 32 | u64::from(low)
        };
        assert_eq!(scoped_seed(), None);
        let outer = DropoutScope::enter(7, 11);
        assert_eq!(draw_seed::<B>(&device), seed_of(0));
        {
            let _inner = DropoutScope::enter(8, 11);
            assert_eq!(draw_seed::<B>(&device), {
                let [low, high, _, _] = PhiloxStream::new(8, 11).block(0);
                u64::from(high) << 32 | u64::from(low)
            });
        }
        assert_eq!(draw_seed::<B>(&device), seed_of(1));
        drop(outer);
        assert_eq!(scoped_seed(), None);
    }

    #[test]
    fn masks_in_a_scope_do_not_depend_on_other_threads_draws() {
        let device = Default::default();
        let dropout = FastDropoutConfig::new(0.5).init();
        let x = Tensor::<B, 2>::ones([8, 64], &device);
        let masks = |x: Tensor<B, 2>| {
            let _scope = DropoutScope::enter(3, 5);
            (dropout.forward(x.clone()).into_data(), dropout.forward(x).into_data())
        };
        let alone = masks(x.clone());
        // another thread drawing from the backend's generator all the while
        let busy = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                for _ in 0..200 {
                    let _ = draw_seed::<B>(&Default::default());
                }
            });
            let _ = draw_seed::<B>(&device);
            let result = masks(x.clone());
            other.join().expect("the other thread");
            result
        });
        assert_eq!(alone, busy);
        assert_ne!(alone.0, alone.1, "two draws of one scope gave one mask");
        let elsewhere = {
            let _scope = DropoutScope::enter(3, 6);
            dropout.forward(x).into_data()
        };
        assert_ne!(alone.0, elsewhere, "another stream gave the same mask");
    }
}

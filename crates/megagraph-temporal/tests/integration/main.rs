//! megagraph-temporal's integration tests: memory, multi-worker training, checkpoints and IMR
//! refinement.
//!
//! One test binary for all of them: every test binary links and instantiates the stack again for
//! its backends, so each separate file costs build time of its own (2-3.5 minutes for a train or
//! temporal test file on 2 cores).

mod memory_matters;
mod refine;
mod resume;
mod workers;

#[path = "../../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

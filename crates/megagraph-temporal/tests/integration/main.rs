//! megagraph-temporal's integration tests: memory, multi-worker training, checkpoints and IMR
//! refinement.
//!
//! One test binary for all of them: each binary links and instantiates the whole stack again for
//! its backends, so separate files cost minutes of build apiece.

mod memory_matters;
mod refine;
mod resume;
mod workers;

#[path = "../../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

//! megagraph-train's integration tests: training runs, the Burn learner strategy, meshes, attention
//! modes and row blocks.
//!
//! One test binary for all of them: every test binary links and instantiates the stack again for
//! its backends, so each separate file costs build time of its own (2-3.5 minutes for a train or
//! temporal test file on 2 cores).

mod attention_modes;
mod blocks;
mod fixtures;
mod learner;
mod mesh;
mod self_training;
mod training;

#[path = "../../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

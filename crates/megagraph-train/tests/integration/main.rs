//! megagraph-train's integration tests: training runs, the Burn learner strategy, meshes, attention
//! modes and row blocks.
//!
//! One test binary for all of them: each binary links and instantiates the whole stack again for
//! its backends, so separate files cost minutes of build apiece.

mod attention_modes;
mod blocks;
mod fixtures;
mod learner;
mod mesh;
mod training;

#[path = "../../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

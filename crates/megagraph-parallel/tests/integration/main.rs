//! megagraph-parallel's integration tests: a mesh, the ring and Ulysses against one device, and
//! failures (the multi-node tests are their own binary, `nodes`: they start it again as child
//! processes).
//!
//! One test binary for all of them: each binary links and instantiates the whole stack again for
//! its backends, so separate files cost minutes of build apiece.

#[path = "../common/mod.rs"]
mod common;
mod equivalence;
mod failure;
mod ring;
mod ulysses;
mod ulysses_mesh;

#[path = "../../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

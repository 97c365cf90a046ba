//! megagraph-parallel's integration tests: a mesh, the ring and Ulysses against one device, and
//! failures (the multi-node tests are their own binary, `nodes`: they start it again as child
//! processes).
//!
//! One test binary for all of them: every test binary links and instantiates the stack again for
//! its backends, so each separate file costs build time of its own (2-3.5 minutes for a train or
//! temporal test file on 2 cores).

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

//! megagraph-models' integration tests: checkpoints, dropout seeding, edge encoding, the graph
//! token and the head.
//!
//! One test binary for all of them: every test binary links and instantiates the stack again for
//! its backends, so each separate file costs build time of its own (2-3.5 minutes for a train or
//! temporal test file on 2 cores).

#[path = "../common/mod.rs"]
mod common;
mod checkpoints;
mod concurrent_backward;
mod dropout_seeding;
mod edge_encoding;
mod graph_token;
mod head;
mod label_input;
mod sparse_graph_token;

#[path = "../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

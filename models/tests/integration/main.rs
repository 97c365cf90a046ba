//! megagraph-models' integration tests: checkpoints, dropout seeding, edge encoding and the graph
//! token.
//!
//! One test binary for all of them: each binary links and instantiates the whole stack again for
//! its backends, so separate files cost minutes of build apiece.

#[path = "../common/mod.rs"]
mod common;
mod checkpoints;
mod dropout_seeding;
mod edge_encoding;
mod graph_token;
mod sparse_graph_token;

#[path = "../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

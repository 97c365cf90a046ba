//! megagraph-kernels' integration tests on the CPU: the reference op against a float64 reference
//! (forward, gradients, merge, half precision, sparse edges, errors) and the fused CPU path (the
//! wgpu tests are their own binaries, `cube_wgpu`, `fusion_wgpu`, `split_k_wgpu`, `cube_timing`).
//!
//! One test binary for all of them: every test binary links and instantiates the stack again for
//! its backends, so each separate file costs build time of its own (2-3.5 minutes for a train or
//! temporal test file on 2 cores).

#[path = "../common/mod.rs"]
mod common;
mod errors;
mod forward;
mod fused_cpu;
mod gradients;
mod half_precision;
mod merge;
mod sparse_edge;

#[path = "../../../tests/support/turn.rs"]
mod turn;

use turn::turn;

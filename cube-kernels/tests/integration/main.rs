//! megagraph-kernels' integration tests on the CPU: the reference op against a float64 reference
//! (forward, gradients, merge, half precision, sparse edges, errors) and the fused CPU path (the
//! wgpu tests are their own binaries, `cube_wgpu`, `fusion_wgpu`, `split_k_wgpu`, `cube_timing`).
//!
//! One test binary for all of them: each binary links and instantiates the whole stack again for
//! its backends, so separate files cost minutes of build apiece.

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

//! Split-K for the forward pass: with too few query rows to fill the device (context-parallel
//! blocks of a few hundred rows), the key tiles are split into chunks computed by separate cubes,
//! and the chunks' partial results are merged by log-sum-exp ([`merge_partials`]).
//!
//! The forward pass runs one cube per (query tile, head, batch element). While that count is
//! below a target ([`set_split_k_target_cubes`], default [`DEFAULT_SPLIT_K_TARGET_CUBES`]),
//! the keys are split in enough chunks to reach it, at most one per key tile.

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

use crate::{AttentionOutput, GraphAttentionBackend, merge_partials};

/// Default target of cubes of the forward pass: four per streaming multiprocessor of an H200
/// (132 of them), enough to hide the latency of the key-tile loads.
pub const DEFAULT_SPLIT_K_TARGET_CUBES: usize = 528;

/// The target of cubes below which the forward pass splits its keys.
static TARGET_CUBES: AtomicUsize = AtomicUsize::new(DEFAULT_SPLIT_K_TARGET_CUBES);

/// Sets the number of cubes below which the CubeCL forward pass splits the keys of each
/// (query tile, head, batch element) over several cubes (split-K); `0` or `1` turns split-K off.
/// Process-wide; the result does not depend on it beyond float rounding.
pub fn set_split_k_target_cubes(cubes: usize) {
    TARGET_CUBES.store(cubes, Ordering::Relaxed);
}

/// The current target, see [`set_split_k_target_cubes`].
pub(crate) fn target_cubes() -> usize {
    TARGET_CUBES.load(Ordering::Relaxed)
}

/// Key tiles per split for a forward pass of `cubes` cubes over `key_tiles` key tiles: all of
/// them while `cubes` reaches `target`, otherwise few enough that the splits bring the cube
/// count to `target` (at least one tile per split).
pub(crate) fn chunk_tiles(cubes: usize, key_tiles: usize, target: usize) -> usize {
    let key_tiles = key_tiles.max(1);
    if cubes == 0 || cubes >= target {
        return key_tiles;
    }
    let splits = target.div_ceil(cubes).min(key_tiles);
    key_tiles.div_ceil(splits)
}

/// Merges the forward pass's `splits` partial results, packed `[splits · batch, heads, q_len,
/// head_dim + 1]` (split-major), into the packed `[batch, heads, q_len, head_dim + 1]` result.
pub(crate) fn merge<B: GraphAttentionBackend>(
    partial: FloatTensor<B>,
    splits: usize,
) -> FloatTensor<B> {
    let partial = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(partial));
    let [layers, heads, q_len, stride] = partial.dims();
    let batch = layers / splits;
    let parts = (0..splits)
        .map(|s| {
            let rows = [s * batch..(s + 1) * batch, 0..heads, 0..q_len, 0..stride];
            AttentionOutput::from_packed(partial.clone().slice(rows))
        })
        .collect();
    let merged =
        merge_partials(parts).unwrap_or_else(|e| unreachable!("the splits share one shape: {e}"));
    merged.into_packed().into_primitive().tensor()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_target_and_no_more() {
        // enough cubes: no split
        assert_eq!(chunk_tiles(600, 40, 528), 40);
        assert_eq!(chunk_tiles(528, 40, 528), 40);
        // 8 heads × 1 query tile: 66 splits wanted, 40 tiles → one tile each
        assert_eq!(chunk_tiles(8, 40, 528), 1);
        // 8 heads × 10 query tiles: 7 splits of 6 tiles (the last one shorter)
        assert_eq!(chunk_tiles(80, 40, 528), 6);
        assert_eq!(40usize.div_ceil(6), 7);
        // split-K off, and degenerate sizes
        assert_eq!(chunk_tiles(1, 40, 0), 40);
        assert_eq!(chunk_tiles(1, 40, 1), 40);
        assert_eq!(chunk_tiles(1, 0, 528), 1);
    }
}

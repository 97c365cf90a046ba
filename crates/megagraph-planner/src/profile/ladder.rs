//! [`ProfileLadder`]: the sizes a profile samples.

use serde::{Deserialize, Serialize};

/// The sizes [`analytic_profile`](super::analytic_profile) (and a profiler) sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileLadder {
    /// Node counts for the embedding, dense-layer and head parts.
    pub rows: Vec<usize>,
    /// Block edges for the attention part.
    pub blocks: Vec<usize>,
    /// Sequences per batch at which the attention part is measured (every block edge at each,
    /// up to [`max_attention_pairs`](Self::max_attention_pairs)). Default: `[1]`.
    #[serde(default = "batch_one")]
    pub attention_batches: Vec<usize>,
    /// Largest `batch * block^2` measured for the attention part at batches above the smallest
    /// (0: no limit). Default: 0.
    #[serde(default)]
    pub max_attention_pairs: usize,
}

fn batch_one() -> Vec<usize> {
    vec![1]
}

impl ProfileLadder {
    /// Sorted distinct sizes of `sizes`.
    fn distinct(sizes: &[usize]) -> Vec<usize> {
        let mut sizes = sizes.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The `(batch, block)` pairs at which the attention part is measured, by batch then block:
    /// every block at the smallest batch, and at larger batches the blocks whose
    /// `batch * block^2` stays within [`max_attention_pairs`](Self::max_attention_pairs) (at
    /// least the two smallest blocks, so every batch can be fitted).
    pub fn attention_points(&self) -> Vec<(usize, usize)> {
        let blocks = Self::distinct(&self.blocks);
        let mut batches = Self::distinct(&self.attention_batches);
        batches.retain(|&b| b > 0);
        if batches.is_empty() {
            batches.push(1);
        }
        let mut points = Vec::new();
        for (i, &batch) in batches.iter().enumerate() {
            for (j, &block) in blocks.iter().enumerate() {
                let pairs = batch.saturating_mul(block).saturating_mul(block);
                if i == 0
                    || j < 2
                    || self.max_attention_pairs == 0
                    || pairs <= self.max_attention_pairs
                {
                    points.push((batch, block));
                }
            }
        }
        points
    }

    /// The row counts measured for the embedding, dense-layer and head parts, sorted.
    pub fn row_points(&self) -> Vec<usize> {
        Self::distinct(&self.rows)
    }
}

impl Default for ProfileLadder {
    /// Powers of two: rows 64 ..= 2^20, blocks 64 ..= 2^18.
    fn default() -> Self {
        Self {
            rows: (6..=20).map(|p| 1usize << p).collect(),
            blocks: (6..=18).map(|p| 1usize << p).collect(),
            attention_batches: vec![1],
            max_attention_pairs: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ProfileSample;

    #[test]
    fn attention_points_cap_the_pairs_of_larger_batches() {
        let ladder = ProfileLadder {
            rows: vec![64, 128],
            blocks: vec![32, 64, 128, 256],
            attention_batches: vec![4, 1, 2],
            max_attention_pairs: 2 * 128 * 128,
        };
        assert_eq!(
            ladder.attention_points(),
            vec![
                (1, 32),
                (1, 64),
                (1, 128),
                (1, 256),
                (2, 32),
                (2, 64),
                (2, 128),
                (4, 32),
                (4, 64),
            ]
        );
        // batches above 1 round-trip through JSON; batch 1 is not written
        let sample = ProfileSample {
            size: 8,
            forward_seconds: 1.0,
            backward_seconds: 2.0,
            saved_bytes: 3,
            peak_bytes: 4,
            batch: 1,
        };
        let json = serde_json::to_value(sample).unwrap();
        assert!(json.get("batch").is_none());
        let two = ProfileSample { batch: 2, ..sample };
        let back: ProfileSample =
            serde_json::from_value(serde_json::to_value(two).unwrap()).unwrap();
        assert_eq!(back, two);
    }
}

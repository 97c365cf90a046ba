//! [`NegativeSampler`]: seeded random negative destinations for link prediction.

use rand::Rng;
use rayon::prelude::*;

use super::error::TemporalError;
use super::events::EventStream;
use super::rng::RowRng;

/// Draws negative destinations uniformly (with replacement) from a candidate set: for a
/// bipartite stream the destination side (its distinct destination nodes, not an id range: the
/// shared layout numbers nodes in order of first appearance, interleaving the sides), otherwise
/// all nodes. As in TGL, a negative may coincide with the event's true destination.
///
/// Draws are a function of `(seed, epoch, batch, event in batch)` only, so they are the same
/// whatever the thread count and whichever batches were drawn before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegativeSampler {
    /// The candidates, ascending.
    candidates: Vec<u32>,
    seed: u64,
}

impl NegativeSampler {
    /// Candidates from `stream`: its distinct destination nodes when
    /// `stream.bipartite() == Some(true)`, else all nodes `0..num_nodes`.
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] if there are no candidates.
    pub fn new(stream: &EventStream, seed: u64) -> Result<NegativeSampler, TemporalError> {
        let candidates = if stream.bipartite() == Some(true) {
            stream.destination_nodes()
        } else {
            (0..stream.num_nodes() as u32).collect()
        };
        Self::from_candidates(candidates, seed)
    }

    /// Candidates given explicitly (sorted and deduplicated here).
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] if `candidates` is empty.
    pub fn from_candidates(
        mut candidates: Vec<u32>,
        seed: u64,
    ) -> Result<NegativeSampler, TemporalError> {
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.is_empty() {
            return Err(TemporalError::config(
                "negative candidates",
                0,
                "needs at least one node to draw from",
            ));
        }
        Ok(NegativeSampler { candidates, seed })
    }

    /// The candidate nodes, ascending.
    pub fn candidates(&self) -> &[u32] {
        &self.candidates
    }

    /// `k` negatives for each of `num_events` events of batch `batch` of epoch `epoch`:
    /// `[num_events, k]` row-major (k = 1 for AP/AUC, 49 for MRR as DistTGL evaluates).
    pub fn sample(&self, epoch: u64, batch: u64, num_events: usize, k: usize) -> Vec<u32> {
        let mut out = vec![0u32; num_events * k];
        if k == 0 {
            return out;
        }
        out.par_chunks_mut(k).enumerate().for_each(|(row, chunk)| {
            let mut rng = RowRng::at(&[self.seed, epoch, batch, row as u64]);
            for slot in chunk {
                *slot = self.candidates[rng.random_range(0..self.candidates.len())];
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bipartite() -> EventStream {
        // Users 0..3, items {3, 5, 6} (node 4 is never a destination).
        EventStream::new(
            7,
            vec![0, 1, 2, 0, 4],
            vec![3, 5, 6, 5, 3],
            vec![0.0, 1.0, 2.0, 3.0, 4.0],
            vec![0; 5],
        )
        .unwrap()
        .with_bipartite(Some(true))
    }

    #[test]
    fn bipartite_negatives_come_from_the_destination_side() {
        let s = NegativeSampler::new(&bipartite(), 3).unwrap();
        assert_eq!(s.candidates(), &[3, 5, 6]);
        let neg = s.sample(0, 0, 100, 49);
        assert_eq!(neg.len(), 4_900);
        assert!(neg.iter().all(|v| [3, 5, 6].contains(v)));
        let all = NegativeSampler::new(&bipartite().with_bipartite(None), 3).unwrap();
        assert_eq!(all.candidates(), &[0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn deterministic_per_seed_epoch_and_batch() {
        let s = NegativeSampler::from_candidates((0..1000).collect(), 11).unwrap();
        let a = s.sample(2, 5, 300, 3);
        assert_eq!(a, s.sample(2, 5, 300, 3));
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(a, one.install(|| s.sample(2, 5, 300, 3)));
        // A prefix of a larger batch draws the same rows.
        assert_eq!(a[..30], s.sample(2, 5, 10, 3)[..]);
        assert_ne!(a, s.sample(2, 6, 300, 3));
        assert_ne!(a, s.sample(3, 5, 300, 3));
        let other = NegativeSampler::from_candidates((0..1000).collect(), 12).unwrap();
        assert_ne!(a, other.sample(2, 5, 300, 3));
    }

    #[test]
    fn draws_are_uniform_over_candidates() {
        let s = NegativeSampler::from_candidates(vec![9, 2, 7, 2, 4], 0).unwrap();
        assert_eq!(s.candidates(), &[2, 4, 7, 9]);
        let neg = s.sample(0, 0, 4_000, 10);
        for c in [2, 4, 7, 9] {
            let n = neg.iter().filter(|&&v| v == c).count();
            // Expected 10,000 each; sd ~ 87.
            assert!((9_500..=10_500).contains(&n), "candidate {c}: {n}");
        }
        assert!(NegativeSampler::from_candidates(Vec::new(), 0).is_err());
        assert!(s.sample(0, 0, 5, 0).is_empty());
    }
}

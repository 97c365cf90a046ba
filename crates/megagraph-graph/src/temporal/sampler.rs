//! [`TemporalSampler`]: the most recent or uniformly drawn neighbours of each root strictly
//! before its time, over one or more hops, parallel over the batch.

use rand::seq::index;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::csr::TemporalCsr;
use super::error::TemporalError;
use super::rng::RowRng;

/// Which neighbours strictly before a root's time are sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SamplingStrategy {
    /// The `fanout` most recent ones (TGN, APAN, JODIE-style memory models).
    #[default]
    Recent,
    /// `fanout` drawn uniformly without replacement (all of them when there are at most
    /// `fanout`), seeded: deterministic per `(seed, batch)` whatever the thread count.
    Uniform,
}

/// Configuration of a [`TemporalSampler`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerConfig {
    /// Neighbours per root at each hop (each >= 1), e.g. `[10]` or `[10, 10]`. Default: `[10]`.
    pub fanouts: Vec<usize>,
    /// Sampling strategy. Default: [`SamplingStrategy::Recent`].
    pub strategy: SamplingStrategy,
    /// Seed of [`SamplingStrategy::Uniform`]. Default: 0.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            fanouts: vec![10],
            strategy: SamplingStrategy::Recent,
            seed: 0,
        }
    }
}

/// The neighbours sampled for one hop. With `R = roots.len()` and `F = fanout`:
///
/// - `roots`, `root_times`, `root_mask`: `[R]`;
/// - `neighbors`, `event_ids`, `times`, `mask`: `[R, F]` row-major (row `r` holds root `r`'s
///   neighbours, `neighbors.len() == R * F`).
///
/// Each row holds the sampled entries in time order (oldest first, ties by event id), then
/// padding: `mask` false, neighbour 0, event id 0, time = the root's time (so `Δt = 0`). Every
/// valid entry's time is strictly before its root's time.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledHop {
    /// Neighbours per root (`F`).
    pub fanout: usize,
    /// Root nodes, `[R]`: the batch's roots at hop 0, the previous hop's `neighbors` after.
    pub roots: Vec<u32>,
    /// Root times, `[R]`: the batch's times at hop 0, the previous hop's `times` after.
    pub root_times: Vec<f64>,
    /// Whether the root is real, `[R]`: all true at hop 0, the previous hop's `mask` after (a
    /// padding root has only padding neighbours).
    pub root_mask: Vec<bool>,
    /// Sampled neighbour nodes, `[R, F]`.
    pub neighbors: Vec<u32>,
    /// Event ids of the sampled interactions, `[R, F]`.
    pub event_ids: Vec<u32>,
    /// Times of the sampled interactions, `[R, F]`.
    pub times: Vec<f64>,
    /// Whether the entry is a real neighbour (false = padding), `[R, F]`.
    pub mask: Vec<bool>,
}

/// Samples temporal neighbourhoods from a [`TemporalCsr`]: hop 0 samples around the batch's
/// `(root, time)` pairs; hop `k + 1` samples around hop `k`'s neighbours at their interaction
/// times. No look-ahead: only interactions strictly before the root's time are seen, so an
/// event queried at its own time never sees itself or any event at the same or a later time.
#[derive(Debug, Clone)]
pub struct TemporalSampler {
    csr: TemporalCsr,
    config: SamplerConfig,
}

impl TemporalSampler {
    /// A sampler over `csr`.
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] if `fanouts` is empty or holds a 0.
    pub fn new(csr: TemporalCsr, config: SamplerConfig) -> Result<TemporalSampler, TemporalError> {
        if config.fanouts.is_empty() {
            return Err(TemporalError::config(
                "fanouts",
                "[]",
                "needs at least one hop",
            ));
        }
        if config.fanouts.contains(&0) {
            return Err(TemporalError::config(
                "fanouts",
                format!("{:?}", config.fanouts),
                "every fanout must be at least 1",
            ));
        }
        Ok(TemporalSampler { csr, config })
    }

    /// The CSR sampled from.
    pub fn csr(&self) -> &TemporalCsr {
        &self.csr
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Samples every hop for the batch `roots` at `times` (`[R]` each); `batch` (e.g. the
    /// global batch counter) selects the random stream of [`SamplingStrategy::Uniform`].
    /// Returns one [`SampledHop`] per fanout; hop `k` has `R * F_0 * ... * F_{k-1}` roots.
    ///
    /// # Errors
    /// [`TemporalError::ColumnLength`] if `times` and `roots` differ in length,
    /// [`TemporalError::NodeOutOfRange`] for a root outside the CSR,
    /// [`TemporalError::NonFiniteTime`] for a NaN or infinite time.
    pub fn sample(
        &self,
        roots: &[u32],
        times: &[f64],
        batch: u64,
    ) -> Result<Vec<SampledHop>, TemporalError> {
        if times.len() != roots.len() {
            return Err(TemporalError::ColumnLength {
                column: "times",
                expected: roots.len(),
                found: times.len(),
            });
        }
        let num_nodes = self.csr.num_nodes();
        if let Some(i) = roots.iter().position(|&r| r as usize >= num_nodes) {
            return Err(TemporalError::NodeOutOfRange {
                column: "root",
                event: i,
                node: roots[i],
                num_nodes,
            });
        }
        if let Some(i) = times.iter().position(|t| !t.is_finite()) {
            return Err(TemporalError::NonFiniteTime {
                event: i,
                time: times[i],
            });
        }
        let mut hops: Vec<SampledHop> = Vec::with_capacity(self.config.fanouts.len());
        for (hop, &fanout) in self.config.fanouts.iter().enumerate() {
            let (roots, root_times, root_mask) = match hops.last() {
                None => (roots.to_vec(), times.to_vec(), vec![true; roots.len()]),
                Some(prev) => (
                    prev.neighbors.clone(),
                    prev.times.clone(),
                    prev.mask.clone(),
                ),
            };
            hops.push(self.sample_hop(roots, root_times, root_mask, fanout, batch, hop as u64));
        }
        Ok(hops)
    }

    /// Samples one hop (roots already validated).
    fn sample_hop(
        &self,
        roots: Vec<u32>,
        root_times: Vec<f64>,
        root_mask: Vec<bool>,
        fanout: usize,
        batch: u64,
        hop: u64,
    ) -> SampledHop {
        let size = roots.len() * fanout;
        let mut neighbors = vec![0u32; size];
        let mut event_ids = vec![0u32; size];
        let mut times = vec![0f64; size];
        let mut mask = vec![false; size];
        neighbors
            .par_chunks_mut(fanout)
            .zip(event_ids.par_chunks_mut(fanout))
            .zip(times.par_chunks_mut(fanout))
            .zip(mask.par_chunks_mut(fanout))
            .enumerate()
            .for_each(|(r, (((nbr, eid), time), valid))| {
                time.fill(root_times[r]);
                if !root_mask[r] {
                    return;
                }
                let node = roots[r];
                let before = self.csr.count_before(node, root_times[r]);
                let (all_n, all_e, all_t) = (
                    &self.csr.neighbors(node)[..before],
                    &self.csr.event_ids(node)[..before],
                    &self.csr.times(node)[..before],
                );
                let mut put = |slot: usize, j: usize| {
                    nbr[slot] = all_n[j];
                    eid[slot] = all_e[j];
                    time[slot] = all_t[j];
                    valid[slot] = true;
                };
                if before <= fanout {
                    (0..before).for_each(|j| put(j, j));
                    return;
                }
                match self.config.strategy {
                    SamplingStrategy::Recent => {
                        (0..fanout).for_each(|slot| put(slot, before - fanout + slot));
                    }
                    SamplingStrategy::Uniform => {
                        let mut rng = RowRng::at(&[self.config.seed, batch, hop, r as u64]);
                        let mut picked = index::sample(&mut rng, before, fanout).into_vec();
                        picked.sort_unstable();
                        picked
                            .into_iter()
                            .enumerate()
                            .for_each(|(slot, j)| put(slot, j));
                    }
                }
            });
        SampledHop {
            fanout,
            roots,
            root_times,
            root_mask,
            neighbors,
            event_ids,
            times,
            mask,
        }
    }
}

#[cfg(test)]
mod tests;

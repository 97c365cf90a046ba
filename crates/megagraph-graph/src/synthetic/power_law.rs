//! Chung-Lu power-law random graphs.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::check_range;
use crate::error::GraphError;
use crate::graph::{Graph, GraphOptions};

/// Edges per parallel chunk (each chunk has its own ChaCha8 stream).
const EDGE_CHUNK: usize = 1 << 16;

/// Configuration of a Chung-Lu graph with a power-law degree distribution.
///
/// Node `i` (in a random relabelling) gets weight `(i + 1)^(-1 / (exponent - 1))`, so expected
/// degrees follow `P(k) ~ k^-exponent`. Each of `round(num_nodes * avg_degree / 2)` edges joins
/// two distinct endpoints drawn in proportion to the weights (alias method, `O(1)` per draw),
/// then the graph is symmetrized and deduplicated: `O(N + E)` work, millions of edges in
/// seconds. Duplicate draws between hubs make the stored average degree somewhat lower than
/// `avg_degree`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PowerLawConfig {
    /// Number of nodes (>= 2). Default: 100_000.
    pub num_nodes: usize,
    /// Target average degree of the symmetrized graph. Default: 10.0.
    pub avg_degree: f64,
    /// Degree-distribution exponent (> 1; real networks: 2..3). Default: 2.5.
    pub exponent: f64,
    /// Random seed. Default: 0.
    pub seed: u64,
}

impl Default for PowerLawConfig {
    fn default() -> Self {
        Self {
            num_nodes: 100_000,
            avg_degree: 10.0,
            exponent: 2.5,
            seed: 0,
        }
    }
}

/// Vose's alias table for O(1) sampling from a discrete distribution.
struct AliasTable {
    prob: Vec<f64>,
    alias: Vec<u32>,
}

impl AliasTable {
    fn new(weights: &[f64]) -> AliasTable {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut prob: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias = vec![0u32; n];
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| prob[i as usize] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            alias[s as usize] = l;
            prob[l as usize] -= 1.0 - prob[s as usize];
            if prob[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        for i in large.into_iter().chain(small) {
            prob[i as usize] = 1.0;
        }
        AliasTable { prob, alias }
    }

    fn sample<R: Rng>(&self, rng: &mut R) -> u32 {
        let i = rng.random_range(0..self.prob.len());
        if rng.random::<f64>() < self.prob[i] {
            i as u32
        } else {
            self.alias[i]
        }
    }
}

impl PowerLawConfig {
    /// Generates the graph (symmetrized, no self loops). Deterministic in the configuration.
    ///
    /// # Errors
    /// [`GraphError::InvalidConfig`] for fewer than 2 nodes, `exponent <= 1`, or a non-finite or
    /// negative `avg_degree` (or one above `num_nodes - 1`); [`GraphError::TooManyNodes`] above
    /// `u32::MAX` nodes.
    pub fn generate(&self) -> Result<Graph, GraphError> {
        let n = self.num_nodes;
        if n < 2 {
            return Err(GraphError::InvalidConfig {
                field: "num_nodes",
                value: n.to_string(),
                reason: "at least 2 nodes",
            });
        }
        if n > u32::MAX as usize {
            return Err(GraphError::TooManyNodes { num_nodes: n });
        }
        check_range(
            "avg_degree",
            self.avg_degree,
            0.0,
            (n - 1) as f64,
            "finite, in [0, num_nodes - 1]",
        )?;
        check_range("exponent", self.exponent, 1.0 + 1e-6, 1e6, "finite and > 1")?;

        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut ids: Vec<u32> = (0..n as u32).collect();
        ids.shuffle(&mut rng);
        let power = -1.0 / (self.exponent - 1.0);
        let mut weights = vec![0f64; n];
        for (rank, &id) in ids.iter().enumerate() {
            weights[id as usize] = ((rank + 1) as f64).powf(power);
        }
        let table = AliasTable::new(&weights);

        let num_edges = (n as f64 * self.avg_degree / 2.0).round() as usize;
        let chunks = num_edges.div_ceil(EDGE_CHUNK);
        let edges: Vec<(u32, u32)> = (0..chunks)
            .into_par_iter()
            .flat_map_iter(|chunk| {
                let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                rng.set_stream(1 + chunk as u64);
                let count = EDGE_CHUNK.min(num_edges - chunk * EDGE_CHUNK);
                let table = &table;
                (0..count).map(move |_| {
                    let u = table.sample(&mut rng);
                    let mut v = table.sample(&mut rng);
                    while v == u {
                        v = table.sample(&mut rng);
                    }
                    (u, v)
                })
            })
            .collect();
        Graph::from_edges(n, &edges, &GraphOptions::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_table_matches_weights() {
        let table = AliasTable::new(&[1.0, 2.0, 3.0, 4.0]);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0usize; 4];
        for _ in 0..200_000 {
            counts[table.sample(&mut rng) as usize] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let expected = 200_000.0 * (i + 1) as f64 / 10.0;
            assert!((c as f64 - expected).abs() < 0.03 * expected, "{counts:?}");
        }
    }

    #[test]
    fn edge_count_degree_tail_and_determinism() {
        let cfg = PowerLawConfig {
            num_nodes: 20_000,
            avg_degree: 10.0,
            exponent: 2.5,
            seed: 7,
        };
        let g = cfg.generate().unwrap();
        let n = 20_000.0;
        let e = g.num_edges() as f64;
        assert!(e >= 10.0 * n / 2.0 && e <= 10.0 * n, "{e} arcs");
        assert!(g.is_symmetric());
        assert!(g.arcs().all(|(u, v)| u != v));
        let max_degree = (0..20_000).map(|v| g.degree(v)).max().unwrap_or(0);
        assert!(max_degree > 200, "no hub: max degree {max_degree}");
        assert_eq!(g, cfg.generate().unwrap());
        assert_ne!(g, PowerLawConfig { seed: 8, ..cfg }.generate().unwrap());
    }

    #[test]
    fn invalid_configs_are_errors() {
        for cfg in [
            PowerLawConfig {
                num_nodes: 1,
                ..PowerLawConfig::default()
            },
            PowerLawConfig {
                exponent: 1.0,
                ..PowerLawConfig::default()
            },
            PowerLawConfig {
                avg_degree: -1.0,
                ..PowerLawConfig::default()
            },
        ] {
            assert!(matches!(
                cfg.generate(),
                Err(GraphError::InvalidConfig { .. })
            ));
        }
    }
}

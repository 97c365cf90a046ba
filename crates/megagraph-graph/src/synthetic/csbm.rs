//! Contextual stochastic block model (CSBM): planted classes, homophilous edges, Gaussian
//! features around class means.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{check_range, standard_normal};
use crate::dataset::{Dataset, NodeFeatures, Split};
use crate::edge_features::EdgeFeatures;
use crate::error::GraphError;
use crate::graph::{Graph, GraphOptions};

/// Nodes per parallel feature chunk (each chunk has its own ChaCha8 stream).
const FEATURE_CHUNK: usize = 4096;
/// Edges per parallel edge chunk.
const EDGE_CHUNK: usize = 1 << 16;

/// Configuration of a contextual stochastic block model dataset.
///
/// Nodes get balanced random classes. Each of `round(num_nodes * avg_degree / 2)` undirected
/// edges picks a uniform endpoint `u`, then with probability `homophily` a uniform other node of
/// `u`'s class, else a uniform node of a uniform other class. Features are
/// `x_v = mean[class(v)] + noise`, noise `N(0, I_dim)`, class means random directions of norm
/// `signal_to_noise`. The default is a small benchmark on which a Graph Transformer trains in
/// about a minute on 2 CPU cores and that features alone do not solve (about 50% accuracy
/// from features, far more with the graph).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsbmConfig {
    /// Number of nodes. Default: 2000.
    pub num_nodes: usize,
    /// Number of classes (>= 2). Default: 5.
    pub num_classes: usize,
    /// Average degree of the symmetrized graph. Default: 8.0.
    pub avg_degree: f64,
    /// Probability that an edge joins two nodes of the same class, in `[0, 1]`. Default: 0.8.
    pub homophily: f64,
    /// Feature dimension (0 = no features). Default: 32.
    pub feature_dim: usize,
    /// Norm of each class mean divided by the per-coordinate noise standard deviation (1).
    /// Default: 1.0.
    pub signal_to_noise: f64,
    /// Edge feature dimension (0 = no edge features). An edge's features are unit Gaussian noise
    /// plus, on the first coordinate, `+signal_to_noise` when it joins two nodes of one class and
    /// `-signal_to_noise` otherwise: a signal an edge encoding can use to tell intra-class
    /// neighbours from the others. Default: 0.
    pub edge_feature_dim: usize,
    /// Fraction of nodes in the training split. Default: 0.6.
    pub train_fraction: f64,
    /// Fraction of nodes in the validation split; the rest is the test split. Default: 0.2.
    pub valid_fraction: f64,
    /// Random seed. Default: 0.
    pub seed: u64,
}

impl Default for CsbmConfig {
    fn default() -> Self {
        Self {
            num_nodes: 2000,
            num_classes: 5,
            avg_degree: 8.0,
            homophily: 0.8,
            feature_dim: 32,
            signal_to_noise: 1.0,
            edge_feature_dim: 0,
            train_fraction: 0.6,
            valid_fraction: 0.2,
            seed: 0,
        }
    }
}

/// A ChaCha8 generator for one independent stream of `seed`.
fn stream(seed: u64, purpose: u64, index: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream((purpose << 48) | index);
    rng
}

impl CsbmConfig {
    fn validate(&self) -> Result<(), GraphError> {
        let invalid = |field, value: usize, reason| GraphError::InvalidConfig {
            field,
            value: value.to_string(),
            reason,
        };
        if self.num_classes < 2 {
            return Err(invalid(
                "num_classes",
                self.num_classes,
                "at least 2 classes",
            ));
        }
        if self.num_nodes < 2 * self.num_classes {
            return Err(invalid(
                "num_nodes",
                self.num_nodes,
                "at least 2 nodes per class",
            ));
        }
        if self.num_nodes > u32::MAX as usize {
            return Err(GraphError::TooManyNodes {
                num_nodes: self.num_nodes,
            });
        }
        check_range(
            "avg_degree",
            self.avg_degree,
            0.0,
            (self.num_nodes - 1) as f64,
            "finite, in [0, num_nodes - 1]",
        )?;
        check_range(
            "homophily",
            self.homophily,
            0.0,
            1.0,
            "a probability in [0, 1]",
        )?;
        check_range(
            "signal_to_noise",
            self.signal_to_noise,
            0.0,
            f64::MAX,
            "finite and >= 0",
        )?;
        check_range("train_fraction", self.train_fraction, 0.0, 1.0, "in [0, 1]")?;
        check_range("valid_fraction", self.valid_fraction, 0.0, 1.0, "in [0, 1]")?;
        check_range(
            "train_fraction + valid_fraction",
            self.train_fraction + self.valid_fraction,
            0.0,
            1.0 + 1e-9,
            "at most 1",
        )?;
        if self.num_train() == 0 {
            return Err(GraphError::InvalidConfig {
                field: "train_fraction",
                value: self.train_fraction.to_string(),
                reason: "the training split would be empty",
            });
        }
        Ok(())
    }

    fn num_train(&self) -> usize {
        ((self.num_nodes as f64 * self.train_fraction).round() as usize).min(self.num_nodes)
    }

    fn num_valid(&self) -> usize {
        ((self.num_nodes as f64 * self.valid_fraction).round() as usize)
            .min(self.num_nodes - self.num_train())
    }

    /// The edge features of `edges` (see [`CsbmConfig::edge_feature_dim`]) as features of
    /// `graph`'s arcs; `None` when `edge_feature_dim` is 0. One ChaCha8 stream per edge chunk.
    fn edge_features(
        &self,
        graph: &Graph,
        edges: &[(u32, u32)],
        labels: &[i64],
    ) -> Result<Option<EdgeFeatures>, GraphError> {
        let d = self.edge_feature_dim;
        if d == 0 {
            return Ok(None);
        }
        let mut rows = vec![0f32; edges.len() * d];
        rows.par_chunks_mut(EDGE_CHUNK * d)
            .enumerate()
            .for_each(|(chunk, block)| {
                let mut rng = stream(self.seed, 3, chunk as u64);
                for (row, &(u, v)) in block.chunks_mut(d).zip(&edges[chunk * EDGE_CHUNK..]) {
                    for x in row.iter_mut() {
                        *x = standard_normal(&mut rng) as f32;
                    }
                    let same = labels[u as usize] == labels[v as usize];
                    row[0] += (if same { 1.0 } else { -1.0 } * self.signal_to_noise) as f32;
                }
            });
        EdgeFeatures::for_arcs(graph, edges, d, &rows).map(Some)
    }

    /// Generates the dataset (named `"csbm"`, graph symmetrized without self loops, splits
    /// sorted). Deterministic in the configuration, including `seed`.
    ///
    /// # Errors
    /// [`GraphError::InvalidConfig`] for out-of-range fields (fewer than 2 classes or 2 nodes per
    /// class, probabilities outside `[0, 1]`, non-finite values, an empty training split).
    pub fn generate(&self) -> Result<Dataset, GraphError> {
        self.validate()?;
        let n = self.num_nodes;
        let c = self.num_classes;
        let mut rng = stream(self.seed, 0, 0);

        // Balanced classes in random order.
        let mut labels: Vec<i64> = (0..n).map(|v| (v % c) as i64).collect();
        labels.shuffle(&mut rng);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); c];
        for (v, &l) in labels.iter().enumerate() {
            members[l as usize].push(v as u32);
        }

        // Edges, in independent chunks so the result does not depend on the thread count.
        let num_edges = (n as f64 * self.avg_degree / 2.0).round() as usize;
        let chunks = num_edges.div_ceil(EDGE_CHUNK);
        let edges: Vec<(u32, u32)> = (0..chunks)
            .into_par_iter()
            .flat_map_iter(|chunk| {
                let mut rng = stream(self.seed, 1, chunk as u64);
                let count = EDGE_CHUNK.min(num_edges - chunk * EDGE_CHUNK);
                let (labels, members) = (&labels, &members);
                (0..count).map(move |_| {
                    let u = rng.random_range(0..n as u32);
                    let cu = labels[u as usize] as usize;
                    let v = if rng.random::<f64>() < self.homophily {
                        let same = &members[cu];
                        let w = same[rng.random_range(0..same.len() - 1)];
                        if w == u { same[same.len() - 1] } else { w }
                    } else {
                        let mut other = rng.random_range(0..c - 1);
                        if other >= cu {
                            other += 1;
                        }
                        let pool = &members[other];
                        pool[rng.random_range(0..pool.len())]
                    };
                    (u, v)
                })
            })
            .collect();
        let graph = Graph::from_edges(n, &edges, &GraphOptions::default())?;
        let edge_features = self.edge_features(&graph, &edges, &labels)?;

        // Features: class means of norm `signal_to_noise`, unit Gaussian noise.
        let features = (self.feature_dim > 0).then(|| {
            let d = self.feature_dim;
            let means: Vec<Vec<f64>> = (0..c)
                .map(|_| {
                    let dir: Vec<f64> = (0..d).map(|_| standard_normal(&mut rng)).collect();
                    let norm = dir.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
                    dir.iter()
                        .map(|x| x * self.signal_to_noise / norm)
                        .collect()
                })
                .collect();
            let mut values = vec![0f32; n * d];
            values
                .par_chunks_mut(FEATURE_CHUNK * d)
                .enumerate()
                .for_each(|(chunk, rows)| {
                    let mut rng = stream(self.seed, 2, chunk as u64);
                    for (i, row) in rows.chunks_mut(d).enumerate() {
                        let mean = &means[labels[chunk * FEATURE_CHUNK + i] as usize];
                        for (x, m) in row.iter_mut().zip(mean) {
                            *x = (m + standard_normal(&mut rng)) as f32;
                        }
                    }
                });
            NodeFeatures {
                num_nodes: n,
                dim: d,
                values,
            }
        });

        // Random split.
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        let (nt, nv) = (self.num_train(), self.num_valid());
        let split = Split::from_order(&order, nt, nt + nv);

        Ok(Dataset {
            name: "csbm".into(),
            graph: graph.into(),
            features,
            edge_features,
            labels,
            num_classes: c,
            split,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_in_the_seed() {
        let a = CsbmConfig::default().generate().unwrap();
        let b = CsbmConfig::default().generate().unwrap();
        assert_eq!(a, b);
        let c = CsbmConfig {
            seed: 1,
            ..CsbmConfig::default()
        }
        .generate()
        .unwrap();
        assert_ne!(a.graph, c.graph);
        assert_ne!(a.labels, c.labels);
        assert_ne!(a.features, c.features);
        assert_ne!(a.split, c.split);
    }

    #[test]
    fn edge_features_are_seeded_and_tell_intra_class_edges_apart() {
        let cfg = CsbmConfig {
            num_nodes: 600,
            edge_feature_dim: 3,
            ..CsbmConfig::default()
        };
        let ds = cfg.generate().unwrap();
        assert_eq!(ds, cfg.generate().unwrap());
        assert!(CsbmConfig::default().generate().unwrap().edge_features.is_none());
        let features = ds.edge_features.as_ref().unwrap();
        assert_eq!((features.dim, features.num_arcs()), (3, ds.graph.num_edges()));
        // first coordinate: mean +1 on intra-class arcs, -1 on the others (unit noise)
        let (mut sums, mut counts) = ([0.0f64; 2], [0usize; 2]);
        for (arc, (u, v)) in ds.graph.arcs().enumerate() {
            let same = usize::from(ds.labels[u as usize] == ds.labels[v as usize]);
            sums[same] += f64::from(features.row(arc)[0]);
            counts[same] += 1;
        }
        let (other, same) = (sums[0] / counts[0] as f64, sums[1] / counts[1] as f64);
        assert!((same - 1.0).abs() < 0.15 && (other + 1.0).abs() < 0.25, "means {same} / {other}");
        let seeded = CsbmConfig { seed: 1, ..cfg }.generate().unwrap();
        assert_ne!(seeded.edge_features, ds.edge_features);
    }

    #[test]
    fn shape_homophily_degree_and_split() {
        let cfg = CsbmConfig {
            num_nodes: 5000,
            ..CsbmConfig::default()
        };
        let ds = cfg.generate().unwrap();
        let g = &ds.graph;
        assert_eq!(g.num_nodes(), 5000);
        assert!(g.is_symmetric());
        let avg = g.num_edges() as f64 / 5000.0;
        assert!((avg - 8.0).abs() < 0.3, "average degree {avg}");
        let (mut same, mut total) = (0usize, 0usize);
        for (u, v) in g.arcs() {
            assert_ne!(u, v, "self loop");
            total += 1;
            same += usize::from(ds.labels[u as usize] == ds.labels[v as usize]);
        }
        let h = same as f64 / total as f64;
        assert!((h - 0.8).abs() < 0.03, "homophily {h}");
        for c in 0..5 {
            assert_eq!(ds.labels.iter().filter(|&&l| l == c).count(), 1000);
        }
        let f = ds.features.as_ref().unwrap();
        assert_eq!((f.num_nodes, f.dim, f.values.len()), (5000, 32, 5000 * 32));
        assert!(f.values.iter().all(|x| x.is_finite()));
        assert_eq!(
            (
                ds.split.train.len(),
                ds.split.valid.len(),
                ds.split.test.len()
            ),
            (3000, 1000, 1000)
        );
        let mut all: Vec<u32> = [&ds.split.train[..], &ds.split.valid, &ds.split.test].concat();
        all.sort_unstable();
        assert_eq!(all, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn class_means_have_the_configured_norm() {
        let cfg = CsbmConfig {
            num_nodes: 20_000,
            num_classes: 2,
            avg_degree: 0.0,
            feature_dim: 16,
            signal_to_noise: 3.0,
            ..CsbmConfig::default()
        };
        let ds = cfg.generate().unwrap();
        let f = ds.features.unwrap();
        for class in 0..2 {
            let mut mean = [0f64; 16];
            let rows: Vec<usize> = (0..20_000).filter(|&v| ds.labels[v] == class).collect();
            for &v in &rows {
                for (m, x) in mean.iter_mut().zip(f.row(v)) {
                    *m += f64::from(*x) / rows.len() as f64;
                }
            }
            let norm = mean.iter().map(|m| m * m).sum::<f64>().sqrt();
            assert!((norm - 3.0).abs() < 0.15, "class {class} mean norm {norm}");
        }
    }

    #[test]
    fn invalid_configs_are_errors() {
        let bad = [
            CsbmConfig {
                num_classes: 1,
                ..CsbmConfig::default()
            },
            CsbmConfig {
                num_nodes: 9,
                ..CsbmConfig::default()
            },
            CsbmConfig {
                homophily: 1.5,
                ..CsbmConfig::default()
            },
            CsbmConfig {
                avg_degree: f64::NAN,
                ..CsbmConfig::default()
            },
            CsbmConfig {
                train_fraction: 0.9,
                valid_fraction: 0.2,
                ..CsbmConfig::default()
            },
            CsbmConfig {
                train_fraction: 0.0,
                ..CsbmConfig::default()
            },
        ];
        for cfg in bad {
            assert!(
                matches!(cfg.generate(), Err(GraphError::InvalidConfig { .. })),
                "{cfg:?} accepted"
            );
        }
    }
}

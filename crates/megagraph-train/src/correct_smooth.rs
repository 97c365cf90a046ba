//! [`CorrectAndSmooth`]: Correct & Smooth (Huang et al. 2021, "Combining Label Propagation and
//! Simple Models Out-performs Graph Neural Networks"), a post-processing of a model's class
//! probabilities by two label propagations over the graph that read the training labels only.

use megagraph_graph::{Dataset, Graph};
use rayon::prelude::*;

use crate::class_argmax::class_argmax;
use crate::config::TrainingConfig;
use crate::features::{gcn_norm, normalized_adjacency_times};

/// Above this, an autoscale factor is taken as 1 (rows whose propagated error all but vanished,
/// as the reference implementation does).
const MAX_AUTOSCALE: f32 = 1000.0;

/// Correct & Smooth of the model's softmax predictions `P` (`[N, C]`), with
/// `Â = D^-1/2 (A + I) D^-1/2` (the GCN normalization, self loops included, as the node
/// features' propagation uses) and `Y` the one-hot training labels:
///
/// - correct: `E⁰ = Y − P` on the training rows and 0 elsewhere,
///   `E ← (1 − α₁) E⁰ + α₁ Â E` for `steps` rounds; then `P' = P + s_v E_v` per row, where
///   autoscale (`scale = None`) takes `s_v = σ / |E_v|₁` with `σ` the mean `|E⁰_v|₁` over the
///   training rows (each row's correction as large as the mean training error) and clamps `E`
///   to `[-1, 1]` after each round; a fixed `scale = Some(s)` takes `s_v = s` and resets the
///   training rows of `E` to `E⁰` after each round;
/// - smooth: `G⁰ = P'` with the training rows replaced by `Y`, `G ← (1 − α₂) G⁰ + α₂ Â G` for
///   `steps` rounds, clamped to `[0, 1]` after each; the prediction is `argmax G`.
///
/// Costs `2 × steps × (edges + N) × C` operations per call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorrectAndSmooth {
    /// `α₁`, the share of the propagated error in each correction round, in [0, 1].
    pub correct_alpha: f64,
    /// `α₂`, the share of the propagated predictions in each smoothing round, in [0, 1].
    pub smooth_alpha: f64,
    /// Rounds `K` of each propagation, at least 1.
    pub steps: usize,
    /// Fixed scale of the correction; `None` = autoscale.
    pub scale: Option<f64>,
}

impl CorrectAndSmooth {
    /// The post-processing `[training]` asks for: `None` unless `correct_smooth` is on.
    pub fn from_config(training: &TrainingConfig) -> Option<Self> {
        training.correct_smooth.then_some(Self {
            correct_alpha: training.correct_alpha,
            smooth_alpha: training.smooth_alpha,
            steps: training.correct_smooth_steps,
            scale: training.correct_scale,
        })
    }

    /// The predicted class of every node of `dataset` from the model's class probabilities
    /// `probabilities` (`[N, C]`, row-major): [`apply`](Self::apply) with the labels of the
    /// training split ([`training_labels`]) and no other label, then the argmax of each row.
    ///
    /// # Panics
    ///
    /// If `probabilities` does not hold `N × C` values.
    pub fn predict(&self, dataset: &Dataset, probabilities: &[f32]) -> Vec<usize> {
        let classes = dataset.num_classes;
        let smoothed = self.apply(&dataset.graph, probabilities, classes, &training_labels(dataset));
        smoothed
            .chunks(classes.max(1))
            .map(class_argmax)
            .collect()
    }

    /// Corrected and smoothed class scores `G` (`[N, C]`, row-major) of the probabilities `P` =
    /// `probabilities` (`[N, C]`) on `graph`, with `train` the `(node, class)` pairs whose labels
    /// the propagations may read (out-of-range pairs are skipped).
    ///
    /// # Panics
    ///
    /// If `probabilities` does not hold `graph.num_nodes() × num_classes` values.
    pub fn apply(&self, graph: &Graph, probabilities: &[f32], num_classes: usize, train: &[(u32, usize)]) -> Vec<f32> {
        let (n, c) = (graph.num_nodes(), num_classes);
        assert_eq!(probabilities.len(), n * c, "Correct & Smooth: probabilities are not [{n}, {c}]");
        let train: Vec<(usize, usize)> = train
            .iter()
            .map(|&(v, y)| (v as usize, y))
            .filter(|&(v, y)| v < n && y < c)
            .collect();
        if c == 0 {
            return Vec::new();
        }
        let norm = gcn_norm(graph, n);
        let corrected = self.correct(graph, &norm, probabilities, c, &train);
        self.smooth(graph, &norm, corrected, c, &train)
    }

    /// `P'`: the probabilities plus the scaled, propagated training error.
    fn correct(&self, graph: &Graph, norm: &[f32], p: &[f32], c: usize, train: &[(usize, usize)]) -> Vec<f32> {
        let mut error0 = vec![0.0f32; p.len()];
        for &(v, y) in train {
            for k in 0..c {
                error0[v * c + k] = f32::from(u8::from(k == y)) - p[v * c + k];
            }
        }
        let reset_train = |e: &mut [f32]| {
            for &(v, _) in train {
                e[v * c..(v + 1) * c].copy_from_slice(&error0[v * c..(v + 1) * c]);
            }
        };
        let error = propagate(graph, norm, &error0, c, self.correct_alpha, self.steps, |e| match self.scale {
            None => e.par_iter_mut().for_each(|x| *x = x.clamp(-1.0, 1.0)),
            Some(_) => reset_train(e),
        });
        let mut corrected = p.to_vec();
        match self.scale {
            Some(scale) => {
                let scale = scale as f32;
                corrected.par_iter_mut().zip(&error).for_each(|(out, e)| *out += scale * e);
            }
            None => {
                let l1 = |row: &[f32]| row.iter().map(|x| x.abs()).sum::<f32>();
                let sigma = train.iter().map(|&(v, _)| l1(&error0[v * c..(v + 1) * c])).sum::<f32>()
                    / train.len().max(1) as f32;
                corrected.par_chunks_mut(c).zip(error.par_chunks(c)).for_each(|(out, e)| {
                    let factor = sigma / l1(e);
                    let factor = if factor.is_finite() && factor <= MAX_AUTOSCALE { factor } else { 1.0 };
                    out.iter_mut().zip(e).for_each(|(o, e)| *o += factor * e);
                });
            }
        }
        corrected
    }

    /// `G`: the corrected probabilities with the training rows set to their labels, propagated.
    fn smooth(&self, graph: &Graph, norm: &[f32], mut start: Vec<f32>, c: usize, train: &[(usize, usize)]) -> Vec<f32> {
        for &(v, y) in train {
            for k in 0..c {
                start[v * c + k] = f32::from(u8::from(k == y));
            }
        }
        propagate(graph, norm, &start, c, self.smooth_alpha, self.steps, |g| {
            g.par_iter_mut().for_each(|x| *x = x.clamp(0.0, 1.0));
        })
    }
}

/// `steps` rounds of `Z ← (1 − α) Z⁰ + α Â Z` from `Z = Z⁰ = start` (`dim` columns), each
/// followed by `post_step`.
fn propagate(
    graph: &Graph,
    norm: &[f32],
    start: &[f32],
    dim: usize,
    alpha: f64,
    steps: usize,
    post_step: impl Fn(&mut [f32]),
) -> Vec<f32> {
    let (keep, spread) = ((1.0 - alpha) as f32, alpha as f32);
    let mut z = start.to_vec();
    for _ in 0..steps {
        z = normalized_adjacency_times(graph, norm, &z, dim);
        z.par_iter_mut().zip(start).for_each(|(out, z0)| *out = keep * z0 + spread * *out);
        post_step(&mut z);
    }
    z
}

/// The `(node, class)` pairs of `dataset`'s training split that have a label: the only labels
/// Correct & Smooth reads (never those of the validation or test nodes).
pub fn training_labels(dataset: &Dataset) -> Vec<(u32, usize)> {
    dataset
        .split
        .train
        .iter()
        .filter_map(|&v| {
            let label = *dataset.labels.get(v as usize)?;
            usize::try_from(label).ok().map(|y| (v, y))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use megagraph_graph::{GraphOptions, Split};

    use super::*;

    /// A triangle with a tail and an isolated node: 0-1, 1-2, 2-0, 2-3, 3-4; 5 alone.
    fn graph() -> Graph {
        Graph::from_edges(6, &[(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)], &GraphOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Softmax-like rows of 3 classes for 6 nodes, each summing to 1.
    fn probabilities() -> Vec<f64> {
        let raw = [
            [0.6, 0.3, 0.1],
            [0.2, 0.5, 0.3],
            [0.1, 0.1, 0.8],
            [0.3, 0.4, 0.3],
            [0.25, 0.25, 0.5],
            [0.7, 0.2, 0.1],
        ];
        raw.iter().flatten().copied().collect()
    }

    /// `Â = D^-1/2 (A + I) D^-1/2` of `graph` as a dense float64 matrix.
    fn dense_adjacency(graph: &Graph) -> Vec<Vec<f64>> {
        let n = graph.num_nodes();
        let degree: Vec<f64> = (0..n).map(|v| (graph.neighbors(v as u32).len() + 1) as f64).collect();
        let mut a = vec![vec![0.0; n]; n];
        for v in 0..n {
            a[v][v] = 1.0 / degree[v];
            for &u in graph.neighbors(v as u32) {
                a[v][u as usize] = 1.0 / (degree[v] * degree[u as usize]).sqrt();
            }
        }
        a
    }

    /// Correct & Smooth by hand in float64, dense, row by row as the paper writes it.
    fn reference(graph: &Graph, p: &[f64], c: usize, train: &[(usize, usize)], cs: &CorrectAndSmooth) -> Vec<f64> {
        let n = graph.num_nodes();
        let a = dense_adjacency(graph);
        let times = |z: &[f64]| -> Vec<f64> {
            (0..n * c).map(|i| (0..n).map(|u| a[i / c][u] * z[u * c + i % c]).sum()).collect()
        };
        let one_hot = |y: usize, k: usize| if k == y { 1.0 } else { 0.0 };
        let mut e0 = vec![0.0; n * c];
        for &(v, y) in train {
            for k in 0..c {
                e0[v * c + k] = one_hot(y, k) - p[v * c + k];
            }
        }
        let mut e = e0.clone();
        for _ in 0..cs.steps {
            let ae = times(&e);
            e = (0..n * c).map(|i| (1.0 - cs.correct_alpha) * e0[i] + cs.correct_alpha * ae[i]).collect();
            match cs.scale {
                None => e.iter_mut().for_each(|x| *x = x.clamp(-1.0, 1.0)),
                Some(_) => {
                    for &(v, _) in train {
                        e[v * c..(v + 1) * c].copy_from_slice(&e0[v * c..(v + 1) * c]);
                    }
                }
            }
        }
        let l1 = |row: &[f64]| row.iter().map(|x| x.abs()).sum::<f64>();
        let sigma = train.iter().map(|&(v, _)| l1(&e0[v * c..(v + 1) * c])).sum::<f64>() / train.len() as f64;
        let mut g0 = p.to_vec();
        for v in 0..n {
            let factor = match cs.scale {
                Some(s) => s,
                None => {
                    let f = sigma / l1(&e[v * c..(v + 1) * c]);
                    if f.is_finite() && f <= 1000.0 { f } else { 1.0 }
                }
            };
            for k in 0..c {
                g0[v * c + k] += factor * e[v * c + k];
            }
        }
        for &(v, y) in train {
            for k in 0..c {
                g0[v * c + k] = one_hot(y, k);
            }
        }
        let mut g = g0.clone();
        for _ in 0..cs.steps {
            let ag = times(&g);
            g = (0..n * c).map(|i| ((1.0 - cs.smooth_alpha) * g0[i] + cs.smooth_alpha * ag[i]).clamp(0.0, 1.0)).collect();
        }
        g
    }

    #[test]
    fn correct_and_smooth_matches_a_dense_float64_hand_computation() {
        let graph = graph();
        let p = probabilities();
        let p32: Vec<f32> = p.iter().map(|&x| x as f32).collect();
        let train = [(0usize, 1usize), (4, 0)];
        let train32: Vec<(u32, usize)> = train.iter().map(|&(v, y)| (v as u32, y)).collect();
        for (correct_alpha, smooth_alpha, steps, scale) in
            [(0.8, 0.8, 1, None), (0.8, 0.8, 50, None), (1.0, 0.5, 7, None), (0.5, 0.9, 10, Some(1.5)), (0.0, 0.0, 3, None)]
        {
            let cs = CorrectAndSmooth { correct_alpha, smooth_alpha, steps, scale };
            let expected = reference(&graph, &p, 3, &train, &cs);
            let got = cs.apply(&graph, &p32, 3, &train32);
            assert_eq!(got.len(), expected.len());
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert!((*g as f64 - e).abs() < 1e-5, "{cs:?}: entry {i}: {g} vs {e}");
            }
        }
        // the propagation moves the predictions (so the comparison above can fail): node 1, next
        // to the training node 0
        let cs = CorrectAndSmooth { correct_alpha: 0.8, smooth_alpha: 0.8, steps: 50, scale: None };
        let got = cs.apply(&graph, &p32, 3, &train32);
        assert!((got[3] - p32[3]).abs() > 1e-2, "{got:?}");
        // training rows are pulled to their labels, and α = 0 keeps P' with them one-hot
        let kept = CorrectAndSmooth { correct_alpha: 0.0, smooth_alpha: 0.0, steps: 3, scale: Some(1.0) };
        let got = kept.apply(&graph, &p32, 3, &train32);
        assert_eq!(&got[0..3], &[0.0, 1.0, 0.0]);
        // with α₁ = 0 and scale 1 the correction is E⁰, zero off the training rows: P' = P there
        assert_eq!(&got[3..6], &p32[3..6]);
    }

    #[test]
    fn autoscale_gives_every_corrected_row_the_mean_training_error() {
        let graph = graph();
        let p: Vec<f32> = probabilities().iter().map(|&x| x as f32).collect();
        let cs = CorrectAndSmooth { correct_alpha: 0.8, smooth_alpha: 0.8, steps: 5, scale: None };
        let norm = gcn_norm(&graph, 6);
        let train_rows = [(0usize, 1usize), (4, 0)];
        let corrected = cs.correct(&graph, &norm, &p, 3, &train_rows);
        // σ: |(0, 1, 0) − (0.6, 0.3, 0.1)|₁ = 1.4 and |(1, 0, 0) − (0.25, 0.25, 0.5)|₁ = 1.5
        let sigma = (1.4 + 1.5) / 2.0;
        for v in 1..4 {
            let moved: f32 = (0..3).map(|k| (corrected[v * 3 + k] - p[v * 3 + k]).abs()).sum();
            assert!((moved - sigma).abs() < 1e-4, "node {v}: {moved} vs {sigma}");
        }
        // the isolated node receives no error: its correction is zero, its row P
        assert_eq!(&corrected[15..18], &p[15..18]);
    }

    /// A dataset of `graph()` with labels `labels`, training nodes 0 and 4, valid 1, test 2, 3, 5.
    fn dataset(labels: Vec<i64>) -> Dataset {
        Dataset {
            name: "tiny".into(),
            graph: Arc::new(graph()),
            features: None,
            edge_features: None,
            labels,
            num_classes: 3,
            split: Split { train: vec![0, 4], valid: vec![1], test: vec![2, 3, 5] },
        }
    }

    #[test]
    fn predictions_read_the_training_labels_only() {
        let p: Vec<f32> = probabilities().iter().map(|&x| x as f32).collect();
        let cs = CorrectAndSmooth { correct_alpha: 0.9, smooth_alpha: 0.8, steps: 50, scale: None };
        let base = cs.predict(&dataset(vec![1, 1, 2, 1, 0, 0]), &p);
        assert_eq!(base.len(), 6);
        // other validation and test labels (or none): the same predictions
        for labels in [vec![1, 2, 0, 0, 0, 2], vec![1, 0, 1, 2, 0, 1], vec![1, -1, -1, -1, 0, -1]] {
            assert_eq!(cs.predict(&dataset(labels.clone()), &p), base, "{labels:?}");
        }
        assert_eq!(training_labels(&dataset(vec![1, 2, 0, 0, 0, 2])), [(0, 1), (4, 0)]);
        // another training label moves them (so the check above can fail)
        assert_ne!(cs.predict(&dataset(vec![2, 1, 2, 1, 2, 0]), &p), base);
        // an unlabelled or out-of-range training node is skipped, not read
        assert_eq!(training_labels(&dataset(vec![-1, 0, 0, 0, 2, 0])), [(4, 2)]);
        let odd = cs.apply(&graph(), &p, 3, &[(0, 7), (9, 1), (4, 2)]);
        assert_eq!(odd, cs.apply(&graph(), &p, 3, &[(4, 2)]));
    }
}

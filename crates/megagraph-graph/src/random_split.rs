//! Seeded random splits: [`ClassSplit`], the same number of training nodes in every class (the
//! "random splits" of Planetoid-style benchmarks), and [`RatioSplit`], shares of the labelled
//! nodes (the random 60/20/20 splits of heterophilous benchmarks).
//!
//! SGFormer and DIFFormer report Cora, CiteSeer and PubMed on such a split
//! (`--rand_split_class`: 20 training nodes per class, then 500 validation and 1,000 test
//! nodes drawn from the rest), not on Planetoid's public split; [`ClassSplit::draw`] lets a run
//! be compared with them on the same protocol.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::dataset::Split;
use crate::error::GraphError;

/// Sizes of a class-balanced random split ([`draw`](Self::draw)). The default is the
/// Planetoid protocol: 20 training nodes per class, 500 validation and 1,000 test nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassSplit {
    /// Training nodes drawn from every class.
    pub per_class: usize,
    /// Validation nodes, drawn from the labelled nodes left after the training nodes.
    pub valid: usize,
    /// Test nodes, drawn from the labelled nodes left after the validation nodes.
    pub test: usize,
}

impl Default for ClassSplit {
    fn default() -> Self {
        Self {
            per_class: 20,
            valid: 500,
            test: 1000,
        }
    }
}

impl ClassSplit {
    /// Draws the split of the nodes labelled `labels` (one class id per node, `-1` for an
    /// unlabelled node, which is never drawn) with the generator seeded by `seed`: for every
    /// class present, in ascending order, `per_class` of its nodes at random; then the other
    /// labelled nodes, shuffled once, give the first `valid` to validation and the next `test`
    /// to test. Each part is returned sorted ascending. The same labels and seed always give
    /// the same split.
    ///
    /// # Errors
    ///
    /// [`GraphError::InvalidConfig`] for `per_class = 0`; [`GraphError::ClassTooSmall`] when a
    /// class has fewer than `per_class` nodes; [`GraphError::SplitTooLarge`] when fewer than
    /// `valid + test` labelled nodes are left after the training nodes.
    pub fn draw(&self, labels: &[i64], seed: u64) -> Result<Split, GraphError> {
        if self.per_class == 0 {
            return Err(GraphError::InvalidConfig {
                field: "per_class",
                value: "0".into(),
                reason: "a class-balanced split needs at least one training node per class",
            });
        }
        // the classes present, ascending, each with its nodes ascending
        let mut members: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for (node, &label) in labels.iter().enumerate() {
            if label >= 0 {
                members.entry(label).or_default().push(node as u32);
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut train = Vec::with_capacity(self.per_class * members.len());
        let mut rest = Vec::new();
        for (class, mut nodes) in members {
            if nodes.len() < self.per_class {
                return Err(GraphError::ClassTooSmall {
                    class: class as usize,
                    count: nodes.len(),
                    per_class: self.per_class,
                });
            }
            nodes.shuffle(&mut rng);
            rest.extend_from_slice(&nodes[self.per_class..]);
            nodes.truncate(self.per_class);
            train.extend(nodes);
        }
        if rest.len() < self.valid + self.test {
            return Err(GraphError::SplitTooLarge {
                valid: self.valid,
                test: self.test,
                available: rest.len(),
            });
        }
        rest.shuffle(&mut rng);
        let train_end = train.len();
        train.extend_from_slice(&rest[..self.valid + self.test]);
        Ok(Split::from_order(&train, train_end, train_end + self.valid))
    }
}

/// Shares of a random split by fractions ([`draw`](Self::draw)), as the 60/20/20 splits over
/// which heterophilous graphs (Actor, Chameleon, Squirrel) are reported, ten of them averaged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioSplit {
    /// Share of the labelled nodes in the training part, in (0, 1].
    pub train: f64,
    /// Share of the labelled nodes in the validation part; the test part takes the rest.
    pub valid: f64,
}

impl Default for RatioSplit {
    fn default() -> Self {
        Self { train: 0.6, valid: 0.2 }
    }
}

impl RatioSplit {
    /// Draws the split of the nodes labelled `labels` (`-1`: unlabelled, never drawn) with the
    /// generator seeded by `seed`: the labelled nodes, shuffled once, give the first
    /// `⌊train · n⌋` to training, the next `⌊valid · n⌋` to validation and the rest to test.
    /// Each part is returned sorted ascending; the same labels and seed give the same split.
    ///
    /// # Errors
    ///
    /// [`GraphError::InvalidConfig`] unless `0 < train`, `0 <= valid` and `train + valid <= 1`.
    pub fn draw(&self, labels: &[i64], seed: u64) -> Result<Split, GraphError> {
        let (train, valid) = (self.train, self.valid);
        if !(train > 0.0 && valid >= 0.0 && train + valid <= 1.0 + 1e-9) {
            return Err(GraphError::InvalidConfig {
                field: "train, valid",
                value: format!("{train}, {valid}"),
                reason: "shares need 0 < train, 0 <= valid and train + valid <= 1",
            });
        }
        let mut nodes: Vec<u32> = (0..labels.len() as u32).filter(|&v| labels[v as usize] >= 0).collect();
        let n = nodes.len();
        nodes.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let share = |fraction: f64| (fraction * n as f64 + 1e-9) as usize;
        let train_end = share(train).min(n);
        let valid_end = (train_end + share(valid)).min(n);
        Ok(Split::from_order(&nodes, train_end, valid_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 classes of 30, 40 and 50 nodes, interleaved, and 10 unlabelled nodes.
    fn labels() -> Vec<i64> {
        let mut labels = Vec::new();
        for (class, count) in [(0, 30), (1, 40), (2, 50)] {
            labels.extend(std::iter::repeat_n(class, count));
        }
        labels.extend(std::iter::repeat_n(-1, 10));
        let mut rng = ChaCha8Rng::seed_from_u64(99);
        labels.shuffle(&mut rng);
        labels
    }

    #[test]
    fn draws_per_class_training_nodes_and_disjoint_parts() {
        let labels = labels();
        let split = ClassSplit { per_class: 5, valid: 20, test: 40 }.draw(&labels, 7).unwrap();
        assert_eq!(split.train.len(), 15);
        for class in 0..3 {
            let count = split.train.iter().filter(|&&v| labels[v as usize] == class).count();
            assert_eq!(count, 5, "class {class}");
        }
        assert_eq!((split.valid.len(), split.test.len()), (20, 40));
        let mut all: Vec<u32> = [&split.train, &split.valid, &split.test].into_iter().flatten().copied().collect();
        assert!(all.iter().all(|&v| labels[v as usize] >= 0), "an unlabelled node was drawn");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 75, "the parts overlap");
        for part in [&split.train, &split.valid, &split.test] {
            assert!(part.windows(2).all(|w| w[0] < w[1]), "not sorted");
        }
    }

    #[test]
    fn a_seed_gives_one_split_and_another_seed_another() {
        let labels = labels();
        let sizes = ClassSplit { per_class: 5, valid: 20, test: 40 };
        let first = sizes.draw(&labels, 3).unwrap();
        assert_eq!(first, sizes.draw(&labels, 3).unwrap());
        let other = sizes.draw(&labels, 4).unwrap();
        assert_ne!(first.train, other.train);
        assert_ne!(first.test, other.test);
    }

    #[test]
    fn a_ratio_split_shares_the_labelled_nodes_by_fractions() {
        let labels = labels();
        let split = RatioSplit { train: 0.6, valid: 0.2 }.draw(&labels, 5).unwrap();
        assert_eq!((split.train.len(), split.valid.len(), split.test.len()), (72, 24, 24));
        let mut all: Vec<u32> = [&split.train, &split.valid, &split.test].into_iter().flatten().copied().collect();
        assert!(all.iter().all(|&v| labels[v as usize] >= 0), "an unlabelled node was drawn");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 120);
        assert_eq!(split, RatioSplit { train: 0.6, valid: 0.2 }.draw(&labels, 5).unwrap());
        assert_ne!(split.train, RatioSplit { train: 0.6, valid: 0.2 }.draw(&labels, 6).unwrap().train);
        for bad in [RatioSplit { train: 0.0, valid: 0.2 }, RatioSplit { train: 0.9, valid: 0.2 }, RatioSplit { train: 0.5, valid: -0.1 }] {
            assert!(matches!(bad.draw(&labels, 0), Err(GraphError::InvalidConfig { .. })), "{bad:?}");
        }
    }

    #[test]
    fn refuses_sizes_the_labels_cannot_give() {
        let labels = labels();
        let too_many = ClassSplit { per_class: 31, valid: 0, test: 0 }.draw(&labels, 0);
        assert!(
            matches!(too_many, Err(GraphError::ClassTooSmall { class: 0, count: 30, per_class: 31 })),
            "{too_many:?}"
        );
        let too_large = ClassSplit { per_class: 10, valid: 60, test: 31 }.draw(&labels, 0);
        assert!(
            matches!(too_large, Err(GraphError::SplitTooLarge { available: 90, .. })),
            "{too_large:?}"
        );
        let none = ClassSplit { per_class: 0, valid: 1, test: 1 }.draw(&labels, 0);
        assert!(matches!(none, Err(GraphError::InvalidConfig { field: "per_class", .. })));
        // exactly what the labels hold is fine
        let exact = ClassSplit { per_class: 10, valid: 60, test: 30 }.draw(&labels, 0).unwrap();
        assert_eq!(exact.train.len() + exact.valid.len() + exact.test.len(), 120);
    }
}

//! A snapshot ensemble of the epochs with the best validation accuracy
//! (`[training] ensemble_epochs`): the run's predictions are the mean of those epochs' softmax
//! predictions instead of the best epoch's alone.

use super::evaluate::SplitTally;
use crate::class_argmax::class_argmax;
use crate::data::SequenceDataset;
use crate::metrics::EnsembleReport;

/// One epoch's predictions of every node, kept by [`SnapshotEnsemble`].
struct Snapshot {
    /// Epoch number, from 1.
    epoch: usize,
    /// The epoch's validation accuracy.
    valid_accuracy: f64,
    /// Softmax probabilities, row-major `[nodes, classes]`.
    probabilities: Vec<f32>,
}

/// The `size` epochs with the best validation accuracy so far (the earlier epoch on a tie) and
/// their predictions: [`report`](Self::report) scores the mean of their probabilities.
///
/// Host memory: `size × nodes × classes` floats.
pub(crate) struct SnapshotEnsemble {
    size: usize,
    /// Best first.
    kept: Vec<Snapshot>,
}

impl SnapshotEnsemble {
    /// An empty ensemble of at most `size` epochs.
    pub(crate) fn new(size: usize) -> Self {
        Self {
            size,
            kept: Vec::with_capacity(size + 1),
        }
    }

    /// Offers epoch `epoch`'s predictions (`probabilities`, `[nodes, classes]`) at validation
    /// accuracy `valid_accuracy`: kept when among the `size` best so far. Epochs are offered in
    /// order, so a later epoch never displaces an earlier one of the same accuracy.
    pub(crate) fn offer(&mut self, epoch: usize, valid_accuracy: f64, probabilities: Vec<f32>) {
        let at = self.kept.partition_point(|kept| kept.valid_accuracy >= valid_accuracy);
        if at >= self.size {
            return;
        }
        self.kept.insert(
            at,
            Snapshot {
                epoch,
                valid_accuracy,
                probabilities,
            },
        );
        self.kept.truncate(self.size);
    }

    /// The epochs kept, best first.
    pub(crate) fn epochs(&self) -> Vec<usize> {
        self.kept.iter().map(|snapshot| snapshot.epoch).collect()
    }

    /// The mean of the kept epochs' probabilities, `[nodes, classes]` (empty when none is kept).
    pub(crate) fn mean_probabilities(&self) -> Vec<f32> {
        let Some(first) = self.kept.first() else {
            return Vec::new();
        };
        let mut sum = vec![0.0f64; first.probabilities.len()];
        for snapshot in &self.kept {
            for (total, &p) in sum.iter_mut().zip(&snapshot.probabilities) {
                *total += f64::from(p);
            }
        }
        let count = self.kept.len() as f64;
        sum.into_iter().map(|total| (total / count) as f32).collect()
    }

    /// The ensemble's validation and test accuracy on `data` (the argmax of the mean
    /// probabilities against each labelled node's class), `None` before any epoch is kept.
    pub(crate) fn report(&self, data: &SequenceDataset) -> Option<EnsembleReport> {
        if self.kept.is_empty() {
            return None;
        }
        let classes = data.dataset.num_classes.max(1);
        let scored: Vec<Option<i64>> = self
            .mean_probabilities()
            .chunks(classes)
            .map(|row| Some(class_argmax(row) as i64))
            .collect();
        let tally = SplitTally::of(data, &scored);
        Some(EnsembleReport {
            epochs: self.epochs(),
            valid_accuracy: tally.accuracy(SplitTally::VALID),
            test_accuracy: tally.accuracy(SplitTally::TEST),
        })
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::SnapshotEnsemble;

    #[test]
    fn keeps_the_best_epochs_earliest_first_on_a_tie_and_averages_them_in_float64() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (size, epochs, values) = (3, 12, 10);
        // few distinct accuracies, so that ties occur
        let accuracies: Vec<f64> = (0..epochs).map(|_| f64::from(rng.random_range(0..4u8)) / 4.0).collect();
        let predictions: Vec<Vec<f32>> = (0..epochs).map(|_| (0..values).map(|_| rng.random::<f32>()).collect()).collect();
        let mut ensemble = SnapshotEnsemble::new(size);
        for (epoch, (&accuracy, probabilities)) in accuracies.iter().zip(&predictions).enumerate() {
            ensemble.offer(epoch + 1, accuracy, probabilities.clone());
        }
        // the reference: a stable sort by accuracy, best first, keeps the earlier epoch on a tie
        let mut order: Vec<usize> = (0..epochs).collect();
        order.sort_by(|&a, &b| accuracies[b].total_cmp(&accuracies[a]));
        let want: Vec<usize> = order[..size].iter().map(|&i| i + 1).collect();
        assert_eq!(ensemble.epochs(), want, "seed {seed}, accuracies {accuracies:?}");
        for (i, got) in ensemble.mean_probabilities().iter().enumerate() {
            let mean = order[..size].iter().map(|&e| f64::from(predictions[e][i])).sum::<f64>() / size as f64;
            assert!((f64::from(*got) - mean).abs() < 1e-6, "seed {seed}, value {i}: {got} vs {mean}");
        }
    }

    #[test]
    fn fewer_epochs_than_its_size_are_all_kept() {
        let mut ensemble = SnapshotEnsemble::new(5);
        assert!(ensemble.epochs().is_empty() && ensemble.mean_probabilities().is_empty());
        ensemble.offer(1, 0.5, vec![1.0, 0.0]);
        ensemble.offer(2, 0.7, vec![0.0, 1.0]);
        assert_eq!(ensemble.epochs(), vec![2, 1]);
        assert_eq!(ensemble.mean_probabilities(), vec![0.5, 0.5]);
    }
}

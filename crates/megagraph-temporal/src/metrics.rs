//! Link-prediction metrics: average precision, ROC AUC and mean reciprocal rank.
//!
//! AP and AUC score positives against negatives as one ranking; MRR ranks each positive among its
//! own negatives. [`LinkScores`] collects a split's scores batch by batch and reports AP both ways:
//! over the whole split, and as the mean of per-batch APs (what TGL reports).

/// Average precision of `positives` against `negatives` (higher score = more likely a link).
///
/// The step-wise area under the precision–recall curve over distinct score thresholds:
/// `Σ (R_k − R_{k−1}) · P_k`, with tied scores taken as one threshold (scikit-learn's
/// `average_precision_score`). `None` when there are no positives.
pub fn average_precision(positives: &[f32], negatives: &[f32]) -> Option<f64> {
    if positives.is_empty() {
        return None;
    }
    let mut scored: Vec<(f32, bool)> = positives.iter().map(|&s| (s, true)).collect();
    scored.extend(negatives.iter().map(|&s| (s, false)));
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total_positives = positives.len() as f64;
    let (mut true_positives, mut seen, mut recall, mut area) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut start = 0;
    while start < scored.len() {
        let mut end = start;
        while end < scored.len() && scored[end].0.total_cmp(&scored[start].0).is_eq() {
            true_positives += usize::from(scored[end].1);
            end += 1;
        }
        seen = end;
        let precision = true_positives as f64 / seen as f64;
        let next_recall = true_positives as f64 / total_positives;
        area += (next_recall - recall) * precision;
        recall = next_recall;
        start = end;
    }
    debug_assert_eq!(seen, scored.len());
    Some(area)
}

/// Area under the ROC curve: the probability that a random positive outscores a random negative,
/// ties counting one half (the Mann–Whitney statistic). `None` without positives or negatives.
pub fn roc_auc(positives: &[f32], negatives: &[f32]) -> Option<f64> {
    if positives.is_empty() || negatives.is_empty() {
        return None;
    }
    let mut scored: Vec<(f32, bool)> = positives.iter().map(|&s| (s, true)).collect();
    scored.extend(negatives.iter().map(|&s| (s, false)));
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Sum of the positives' 1-based ranks, tied scores sharing their mean rank.
    let mut rank_sum = 0.0f64;
    let mut start = 0;
    while start < scored.len() {
        let mut end = start;
        while end < scored.len() && scored[end].0.total_cmp(&scored[start].0).is_eq() {
            end += 1;
        }
        let mean_rank = (start + 1 + end) as f64 / 2.0;
        let tied_positives = scored[start..end].iter().filter(|(_, positive)| *positive).count();
        rank_sum += mean_rank * tied_positives as f64;
        start = end;
    }
    let (p, n) = (positives.len() as f64, negatives.len() as f64);
    Some((rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// Mean reciprocal rank of each positive among its own negatives.
///
/// `negatives` holds `per_positive` scores for each positive, positive by positive. A positive's
/// rank is one plus the number of its negatives scoring at least as high (ties rank the positive
/// last, so a constant scorer gets no credit). `None` without positives or when the lengths
/// disagree.
pub fn mean_reciprocal_rank(positives: &[f32], negatives: &[f32], per_positive: usize) -> Option<f64> {
    if positives.is_empty() || negatives.len() != positives.len() * per_positive {
        return None;
    }
    let total: f64 = positives
        .iter()
        .enumerate()
        .map(|(i, &positive)| {
            let own = &negatives[i * per_positive..(i + 1) * per_positive];
            let above = own.iter().filter(|&&negative| negative >= positive).count();
            1.0 / (1 + above) as f64
        })
        .sum();
    Some(total / positives.len() as f64)
}

/// A split's link scores, gathered batch by batch.
#[derive(Debug, Clone, Default)]
pub struct LinkScores {
    positives: Vec<f32>,
    negatives: Vec<f32>,
    batch_ap_sum: f64,
    batches: usize,
}

impl LinkScores {
    /// Adds one batch: a score per positive event and one negative score per positive.
    pub fn push_batch(&mut self, positives: &[f32], negatives: &[f32]) {
        if let Some(ap) = average_precision(positives, negatives) {
            self.batch_ap_sum += ap;
            self.batches += 1;
        }
        self.positives.extend_from_slice(positives);
        self.negatives.extend_from_slice(negatives);
    }

    /// AP over the whole split as one ranking.
    pub fn average_precision(&self) -> Option<f64> {
        average_precision(&self.positives, &self.negatives)
    }

    /// The mean of the per-batch APs (TGL's figure).
    pub fn batch_mean_average_precision(&self) -> Option<f64> {
        (self.batches > 0).then(|| self.batch_ap_sum / self.batches as f64)
    }

    /// ROC AUC over the whole split.
    pub fn roc_auc(&self) -> Option<f64> {
        roc_auc(&self.positives, &self.negatives)
    }

    /// Positive events scored so far.
    pub fn len(&self) -> usize {
        self.positives.len()
    }

    /// Whether no event was scored.
    pub fn is_empty(&self) -> bool {
        self.positives.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// AP by its definition: mean over positives of the precision at that positive's threshold
    /// (all items scoring at least as high), which equals the step-wise sum with tied thresholds.
    fn ap_by_definition(positives: &[f32], negatives: &[f32]) -> f64 {
        let all: Vec<(f32, bool)> =
            positives.iter().map(|&s| (s, true)).chain(negatives.iter().map(|&s| (s, false))).collect();
        let precision_at = |t: f32| {
            let at_least: Vec<_> = all.iter().filter(|(s, _)| *s >= t).collect();
            at_least.iter().filter(|(_, p)| *p).count() as f64 / at_least.len() as f64
        };
        positives.iter().map(|&t| precision_at(t)).sum::<f64>() / positives.len() as f64
    }

    fn auc_by_pairs(positives: &[f32], negatives: &[f32]) -> f64 {
        let mut wins = 0.0;
        for &p in positives {
            for &n in negatives {
                wins += if p > n { 1.0 } else if p == n { 0.5 } else { 0.0 };
            }
        }
        wins / (positives.len() * negatives.len()) as f64
    }

    fn random_scores(rng: &mut impl Rng, len: usize, levels: u32) -> Vec<f32> {
        // Few levels force ties.
        (0..len).map(|_| rng.random_range(0..levels) as f32 / levels as f32).collect()
    }

    #[test]
    fn ap_and_auc_match_their_definitions_on_random_scores_with_ties() {
        let seed = rand::random::<u64>();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..50 {
            let (p, n) = (rng.random_range(1..40), rng.random_range(1..40));
            let levels = rng.random_range(2..50);
            let positives = random_scores(&mut rng, p, levels);
            let negatives = random_scores(&mut rng, n, levels);
            let ap = average_precision(&positives, &negatives).unwrap();
            let auc = roc_auc(&positives, &negatives).unwrap();
            assert!((ap - ap_by_definition(&positives, &negatives)).abs() < 1e-12, "seed {seed}");
            assert!((auc - auc_by_pairs(&positives, &negatives)).abs() < 1e-12, "seed {seed}");
        }
    }

    #[test]
    fn perfect_and_constant_scorers() {
        assert_eq!(average_precision(&[0.9, 0.8], &[0.1, 0.2]), Some(1.0));
        assert_eq!(roc_auc(&[0.9, 0.8], &[0.1, 0.2]), Some(1.0));
        assert_eq!(roc_auc(&[0.5, 0.5], &[0.5, 0.5]), Some(0.5));
        assert_eq!(average_precision(&[0.5], &[0.5]), Some(0.5));
        assert_eq!(mean_reciprocal_rank(&[0.9, 0.5], &[0.1, 0.2, 0.5, 0.6], 2), Some((1.0 + 1.0 / 3.0) / 2.0));
        assert_eq!(average_precision(&[], &[0.1]), None);
        assert_eq!(roc_auc(&[0.1], &[]), None);
        assert_eq!(mean_reciprocal_rank(&[0.1], &[0.1], 2), None);
    }

    #[test]
    fn split_scores_report_both_ap_figures() {
        let mut scores = LinkScores::default();
        scores.push_batch(&[0.9, 0.1], &[0.5, 0.2]);
        scores.push_batch(&[0.8], &[0.9]);
        let first = average_precision(&[0.9, 0.1], &[0.5, 0.2]).unwrap();
        let second = average_precision(&[0.8], &[0.9]).unwrap();
        assert!((scores.batch_mean_average_precision().unwrap() - (first + second) / 2.0).abs() < 1e-12);
        let whole = average_precision(&[0.9, 0.1, 0.8], &[0.5, 0.2, 0.9]).unwrap();
        assert!((scores.average_precision().unwrap() - whole).abs() < 1e-12);
        assert_eq!(scores.len(), 3);
    }
}

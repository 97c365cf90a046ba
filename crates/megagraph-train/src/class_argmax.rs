//! [`class_argmax`]: the class a row of per-class scores predicts.

/// Index of the largest score of `row` (the first on a tie; 0 for an empty row or one with no
/// comparable score), the class a row of probabilities or scores `[classes]` predicts.
pub(crate) fn class_argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (k, &score)| if score > best.1 { (k, score) } else { best })
        .0
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::class_argmax;

    #[test]
    fn the_first_largest_score_wins() {
        assert_eq!(class_argmax(&[]), 0);
        assert_eq!(class_argmax(&[0.2, 0.5, 0.5, 0.1]), 1);
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let row: Vec<f32> = (0..9).map(|_| f32::from(rng.random_range(0..4u8))).collect();
        let want = (0..row.len()).rev().max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
        assert_eq!(class_argmax(&row), want, "seed {seed}, row {row:?}");
    }
}

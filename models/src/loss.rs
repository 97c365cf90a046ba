use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, backend::Backend};

/// Node-classification loss: cross-entropy summed over the positions whose `weight` is 1 and
/// divided by `count`, the number of such positions in the whole step. Passing the step's total
/// lets partial batches (micro-batches, context blocks, replicas) sum to the full-batch loss.
///
/// - `logits`: `[batch, seq, classes]`; `labels`, `weight`: `[batch, seq]`
/// - output: `[1]`
pub fn masked_cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    weight: Tensor<B, 2>,
    count: usize,
) -> Tensor<B, 1> {
    masked_smoothed_cross_entropy(logits, labels, weight, count, 0.0)
}

/// [`masked_cross_entropy`] with label smoothing `smoothing` (ε): each position's target is
/// `1 − ε` on its label plus `ε / C` on every one of the `C` classes (the definition of Burn's
/// `CrossEntropyLossConfig::with_smoothing` and PyTorch's `label_smoothing`), so a position's
/// loss is `−(1 − ε) log p_label − (ε / C) Σ_c log p_c`. `smoothing = 0` is the plain
/// cross-entropy (and computes no class mean).
///
/// - `logits`: `[batch, seq, classes]`; `labels`, `weight`: `[batch, seq]`
/// - output: `[1]`
pub fn masked_smoothed_cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    weight: Tensor<B, 2>,
    count: usize,
    smoothing: f64,
) -> Tensor<B, 1> {
    let log_p = log_softmax(logits, 2);
    let picked = log_p.clone().gather(2, labels.unsqueeze_dim(2)).squeeze_dim::<2>(2);
    let per_position = if smoothing > 0.0 {
        let class_mean = log_p.mean_dim(2).squeeze_dim::<2>(2);
        picked * (1.0 - smoothing) + class_mean * smoothing
    } else {
        picked
    };
    (per_position * weight).sum().neg() / count.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{ElementConversion, TensorData};

    /// `−(1 − ε) log p_y − (ε / C) Σ_c log p_c` per weighted position, summed and divided by
    /// `count`, in float64.
    fn reference(logits: &[[f64; 3]], labels: &[usize], weight: &[f64], count: usize, eps: f64) -> f64 {
        let mut total = 0.0;
        for ((row, &label), &w) in logits.iter().zip(labels).zip(weight) {
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let log_z = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            let log_p: Vec<f64> = row.iter().map(|x| x - log_z).collect();
            let mean = log_p.iter().sum::<f64>() / log_p.len() as f64;
            total += w * -((1.0 - eps) * log_p[label] + eps * mean);
        }
        total / count as f64
    }

    #[test]
    fn smoothed_loss_matches_a_float64_hand_computation() {
        // one sequence of four positions, three classes; position 2 is not scored
        let logits = [[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [5.0, 0.0, 0.0], [-3.0, 4.0, 1.0]];
        let labels = [0usize, 2, 1, 0];
        let weight = [1.0, 1.0, 0.0, 1.0];
        let device = Default::default();
        let flat: Vec<f32> = logits.iter().flatten().map(|&x| x as f32).collect();
        let logits_t = Tensor::<Flex, 3>::from_data(TensorData::new(flat, [1, 4, 3]), &device);
        let labels_t = Tensor::<Flex, 2, Int>::from_data(
            TensorData::new(labels.iter().map(|&l| l as i64).collect::<Vec<_>>(), [1, 4]),
            &device,
        );
        let weight_t = Tensor::<Flex, 2>::from_data(
            TensorData::new(weight.iter().map(|&w| w as f32).collect::<Vec<_>>(), [1, 4]),
            &device,
        );
        // count 5: the step's total may exceed this batch's scored positions
        for eps in [0.0, 0.1, 0.2, 0.9] {
            let loss = masked_smoothed_cross_entropy(logits_t.clone(), labels_t.clone(), weight_t.clone(), 5, eps)
                .into_scalar()
                .elem::<f64>();
            let expected = reference(&logits, &labels, &weight, 5, eps);
            assert!((loss - expected).abs() < 1e-5, "eps {eps}: {loss} vs {expected}");
        }
        let plain = masked_cross_entropy(logits_t.clone(), labels_t.clone(), weight_t.clone(), 5)
            .into_scalar()
            .elem::<f64>();
        assert!((plain - reference(&logits, &labels, &weight, 5, 0.0)).abs() < 1e-5);
        // smoothing changes the loss of confident predictions: the test above can fail
        assert!((reference(&logits, &labels, &weight, 5, 0.1) - plain).abs() > 1e-2);
    }
}

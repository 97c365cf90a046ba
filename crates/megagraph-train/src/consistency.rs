//! [`ConsistencyRegularization`]: GRAND's consistency loss (Feng et al. 2020, "Graph Random
//! Neural Network for Semi-Supervised Learning on Graphs") over every node of a step, labelled
//! or not.

use burn::tensor::activation::softmax;
use burn::tensor::{Tensor, backend::Backend};

use crate::config::{RunContext, TrainConfig};

/// A step runs the model `samples` times, each with its own dropout masks. With `P_s` the
/// class probabilities of sample `s`, `P̄` their mean and `P̂ ∝ P̄^{1/T}` (row-normalized,
/// constant for the gradient) its sharpening at temperature `T`, the loss adds
/// `weight · (1/S) Σ_s mean_v ‖P_s(v) − P̂(v)‖²` over the step's nodes `v`, to the mean
/// cross-entropy of the samples. The unlabelled nodes thereby learn to agree with their own
/// confident predictions under dropout, which regularizes a model trained on few labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConsistencyRegularization {
    /// Forward passes per step `S`, at least 2.
    pub samples: usize,
    /// Weight `λ` of the consistency term, positive.
    pub weight: f64,
    /// Sharpening temperature `T`, in (0, 1].
    pub temperature: f64,
}

impl ConsistencyRegularization {
    /// The regularization `config` asks for in `run` ([`TrainConfig::consistency_weight`]):
    /// `None` when it is off.
    pub fn from_config(config: &TrainConfig, run: RunContext) -> Option<Self> {
        let weight = config.consistency_weight(run);
        (weight > 0.0).then_some(Self {
            samples: config.training.consistency_samples,
            weight,
            temperature: config.training.consistency_temperature,
        })
    }

    /// The weighted consistency term of the logits of each sample (`[batch, seq, classes]`
    /// each), over the positions where `present` (`[batch, seq]`) is 1.
    ///
    /// # Panics
    ///
    /// If `logits` is empty or its shapes disagree.
    pub fn loss<B: Backend>(&self, logits: &[Tensor<B, 3>], present: Tensor<B, 2>) -> Tensor<B, 1> {
        let probabilities: Vec<Tensor<B, 3>> = logits.iter().map(|l| softmax(l.clone(), 2)).collect();
        let mean = probabilities
            .iter()
            .cloned()
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| panic!("consistency of no sample"))
            / logits.len() as f64;
        let sharpened = mean.powf_scalar(1.0 / self.temperature);
        let sharpened = (sharpened.clone() / sharpened.sum_dim(2)).detach();
        let present = present.unsqueeze_dim::<3>(2);
        let count = present.clone().sum().clamp_min(1.0);
        let squared: Tensor<B, 1> = probabilities
            .into_iter()
            .map(|p| ((p - sharpened.clone()).powi_scalar(2) * present.clone()).sum())
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| panic!("consistency of no sample"));
        squared / count * (self.weight / logits.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::TensorData;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    #[test]
    fn consistency_matches_a_float64_reference() {
        let seed = rand::random::<u64>();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (samples, batch, seq, classes) = (3, 2, 5, 4);
        let regularization = ConsistencyRegularization {
            samples,
            weight: rng.random_range(0.1..2.0),
            temperature: rng.random_range(0.2..1.0),
        };
        let raw: Vec<Vec<f64>> = (0..samples)
            .map(|_| (0..batch * seq * classes).map(|_| rng.random_range(-3.0..3.0)).collect())
            .collect();
        let present: Vec<f64> = (0..batch * seq).map(|_| f64::from(u8::from(rng.random_bool(0.7)))).collect();
        let device = Default::default();
        let logits: Vec<Tensor<Flex, 3>> = raw
            .iter()
            .map(|r| {
                let values: Vec<f32> = r.iter().map(|&x| x as f32).collect();
                Tensor::from_data(TensorData::new(values, [batch, seq, classes]), &device)
            })
            .collect();
        let mask = Tensor::<Flex, 2>::from_data(
            TensorData::new(present.iter().map(|&x| x as f32).collect::<Vec<_>>(), [batch, seq]),
            &device,
        );
        let got = regularization.loss(&logits, mask).into_scalar() as f64;

        let softmax_row = |row: &[f64]| -> Vec<f64> {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|x| (x - max).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        let (mut total, mut count) = (0.0f64, 0.0f64);
        for v in 0..batch * seq {
            if present[v] == 0.0 {
                continue;
            }
            count += 1.0;
            let p: Vec<Vec<f64>> = raw.iter().map(|r| softmax_row(&r[v * classes..(v + 1) * classes])).collect();
            let mean: Vec<f64> = (0..classes).map(|k| p.iter().map(|ps| ps[k]).sum::<f64>() / samples as f64).collect();
            let powered: Vec<f64> = mean.iter().map(|m| m.powf(1.0 / regularization.temperature)).collect();
            let norm: f64 = powered.iter().sum();
            for ps in &p {
                total += (0..classes).map(|k| (ps[k] - powered[k] / norm).powi(2)).sum::<f64>();
            }
        }
        let want = regularization.weight * total / count.max(1.0) / samples as f64;
        assert!((got - want).abs() < 1e-5 * want.abs().max(1.0), "seed {seed}: {got} vs {want}");
    }
}

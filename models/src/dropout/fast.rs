//! [`FastDropout`]: dropout whose masks come from a counter-based generator, filled in parallel.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use super::{PhiloxStream, draw_seed, dropout_mask_tensor};

/// Configuration of a [`FastDropout`].
#[derive(Config, Debug)]
pub struct FastDropoutConfig {
    /// Probability of zeroing an element while training, in `[0, 1]`.
    pub prob: f64,
}

/// Dropout (zero each element with probability `prob` while training, scale the rest by
/// `1 / (1 - prob)`) with masks drawn from Philox4x32-10 in parallel on the rayon pool.
///
/// A drop-in for `burn::nn::Dropout`: same rule, same no-op outside autodiff, but the mask is one
/// bool tensor (one byte per element) filled by a counter-based generator on every core, where
/// Burn's is a float tensor of Bernoulli draws from one ChaCha stream, one element at a time.
///
/// **Seeding.** Each [`forward`](Self::forward) call draws a fresh 64-bit seed from the
/// backend's random generator (the one `Backend::seed` sets; the trainer reseeds it every epoch),
/// so each layer and each step gets its own mask, and a run seeded the same way draws the same
/// masks. The mask is then a pure function of that seed and each element's index, whatever the
/// thread count. [`forward_seeded`](Self::forward_seeded) takes the seed and stream explicitly.
#[derive(Module, Clone, Debug)]
pub struct FastDropout {
    /// Probability of zeroing an element while training.
    pub prob: f64,
}

impl FastDropoutConfig {
    /// Initializes a [`FastDropout`].
    ///
    /// # Panics
    ///
    /// If `prob` is not in `[0, 1]` (as `burn::nn::DropoutConfig::init`; the trainer validates
    /// its configuration before building a model).
    pub fn init(&self) -> FastDropout {
        assert!(
            (0.0..=1.0).contains(&self.prob),
            "dropout probability must be in [0, 1], got {}",
            self.prob
        );
        FastDropout { prob: self.prob }
    }
}

impl FastDropout {
    /// Applies dropout while training (autodiff enabled on the input's device); the identity
    /// otherwise or when `prob` is 0. Draws its seed as described on [`FastDropout`].
    ///
    /// - input: `[..., any]`; output: the same shape
    pub fn forward<B: Backend, const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        if self.prob == 0.0 || !B::ad_enabled(&input.device()) {
            return input;
        }
        let seed = draw_seed::<B>(&input.device());
        self.forward_seeded(input, seed, 0)
    }

    /// Applies dropout with the mask of (`seed`, `stream`): element `i` (row-major) is dropped
    /// when word `i` of that Philox stream is below `prob · 2³²`. Applies whether or not autodiff
    /// is enabled. The gradient is `mask / (1 - prob)`.
    ///
    /// - input: `[..., any]`; output: the same shape
    pub fn forward_seeded<B: Backend, const D: usize>(
        &self,
        input: Tensor<B, D>,
        seed: u64,
        stream: u64,
    ) -> Tensor<B, D> {
        if self.prob == 0.0 {
            return input;
        }
        if self.prob >= 1.0 {
            return input.zeros_like();
        }
        let dropped = dropout_mask_tensor::<B, D>(
            input.shape(),
            self.prob,
            PhiloxStream::new(seed, stream),
            &input.device(),
        );
        input
            .mask_fill(dropped, 0.0)
            .mul_scalar(1.0 / (1.0 - self.prob))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Distribution, TensorData};

    use super::*;
    use crate::dropout::dropout_mask;

    #[test]
    fn the_output_and_gradient_are_the_mask_over_the_keep_probability() {
        let device = Default::default();
        let prob = 0.3;
        let (seed, stream) = (0x5EED, 11);
        let x = Tensor::<Autodiff<Flex>, 3>::random(
            [3, 7, 50],
            Distribution::Normal(0.0, 1.0),
            &device,
        )
        .require_grad();
        let weights = Tensor::<Autodiff<Flex>, 3>::random(
            [3, 7, 50],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let dropout = FastDropoutConfig::new(prob).init();
        let y = dropout.forward_seeded(x.clone(), seed, stream);
        let grads = (y.clone() * weights.clone()).sum().backward();
        let grad = x.grad(&grads).expect("a gradient of x");

        // float64 reference from the mask alone
        let mask = dropout_mask(3 * 7 * 50, prob, PhiloxStream::new(seed, stream));
        let xs: Vec<f64> = x.into_data().iter::<f64>().collect();
        let ws: Vec<f64> = weights.into_data().iter::<f64>().collect();
        let keep = |i: usize| if mask[i] { 0.0 } else { 1.0 / (1.0 - prob) };
        let expected_y: Vec<f64> = (0..xs.len()).map(|i| xs[i] * keep(i)).collect();
        let expected_grad: Vec<f64> = (0..xs.len()).map(|i| ws[i] * keep(i)).collect();
        let tolerance = burn::tensor::Tolerance::<f64>::absolute(1e-5);
        y.into_data()
            .convert::<f64>()
            .assert_approx_eq::<f64>(&TensorData::new(expected_y, [3, 7, 50]), tolerance);
        grad.into_data()
            .convert::<f64>()
            .assert_approx_eq::<f64>(&TensorData::new(expected_grad, [3, 7, 50]), tolerance);
        assert!(mask.iter().any(|&d| d) && mask.iter().any(|&d| !d));
    }

    #[test]
    fn forward_is_the_identity_outside_training_and_fresh_per_call_inside() {
        let device = Default::default();
        let dropout = FastDropoutConfig::new(0.5).init();
        let x = Tensor::<Flex, 2>::ones([4, 64], &device);
        dropout
            .forward(x.clone())
            .into_data()
            .assert_eq(&x.into_data(), true);

        let x = Tensor::<Autodiff<Flex>, 2>::ones([4, 64], &device);
        let (a, b) = (
            dropout.forward(x.clone()).into_data(),
            dropout.forward(x).into_data(),
        );
        assert_ne!(a, b, "two calls drew the same mask");
        for value in a.iter::<f32>() {
            assert!(value == 0.0 || value == 2.0, "{value}");
        }
    }

    #[test]
    fn probability_one_zeroes_and_zero_passes_through() {
        let device = Default::default();
        let x = Tensor::<Flex, 2>::random([3, 5], Distribution::Normal(0.0, 1.0), &device);
        let zeroed = FastDropoutConfig::new(1.0)
            .init()
            .forward_seeded(x.clone(), 1, 2);
        zeroed
            .into_data()
            .assert_eq(&TensorData::zeros::<f32, _>([3, 5]), true);
        let same = FastDropoutConfig::new(0.0)
            .init()
            .forward_seeded(x.clone(), 1, 2);
        same.into_data().assert_eq(&x.into_data(), true);
    }
}

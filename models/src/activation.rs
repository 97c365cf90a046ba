//! [`ExactGelu`]: GELU with the exact (erf) derivative on every backend.

use burn::module::Module;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// `gelu(x) = x · Φ(x) = ½ · x · (1 + erf(x / √2))`, built from `erf` and element-wise ops.
///
/// Burn 0.21's `Gelu` computes the exact forward everywhere, but its backward is backend-specific:
/// Flex differentiates the erf form, while backends on the default `gelu_backward` (CubeCL:
/// wgpu, CUDA) use the derivative of the tanh approximation, about 1e-4 off. Composed from
/// `erf`, the autodiff graph differentiates the same function on every backend, so a model's
/// gradients agree across backends to float rounding. Holds no parameters.
#[derive(Module, Clone, Debug, Default)]
pub struct ExactGelu;

impl ExactGelu {
    /// A GELU activation.
    pub fn new() -> Self {
        Self
    }

    /// Applies GELU element-wise; any shape.
    pub fn forward<B: Backend, const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let cdf = (x.clone() * std::f64::consts::FRAC_1_SQRT_2)
            .erf()
            .add_scalar(1.0)
            * 0.5;
        x * cdf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::TensorData;

    /// `erf` by its Taylor series in f64 (|x| ≤ 3 here: converges well within 80 terms).
    fn erf64(x: f64) -> f64 {
        let (mut term, mut sum) = (x, x);
        for n in 1..80 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn value_and_derivative_match_a_float64_reference() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64);
        let mut state = seed | 1;
        let xs: Vec<f32> = (0..257)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 6_000_001) as f32 / 1_000_000.0 - 3.0
            })
            .collect();
        let x = Tensor::<B, 1>::from_data(TensorData::new(xs.clone(), [xs.len()]), &device)
            .require_grad();
        let y = ExactGelu::new().forward(x.clone());
        let grads = y.clone().sum().backward();
        let dx: Vec<f32> = x
            .grad(&grads)
            .map(|g| g.into_data().iter::<f32>().collect())
            .unwrap_or_default();
        let y: Vec<f32> = y.into_data().iter::<f32>().collect();
        for (i, &v) in xs.iter().enumerate() {
            let v = f64::from(v);
            let cdf = 0.5 * (1.0 + erf64(v / std::f64::consts::SQRT_2));
            let pdf = (-v * v / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let (value, slope) = (v * cdf, cdf + v * pdf);
            assert!(
                (f64::from(y[i]) - value).abs() <= 1e-6 * (1.0 + value.abs()),
                "gelu({v}) = {} vs {value} (seed {seed})",
                y[i]
            );
            assert!(
                (f64::from(dx[i]) - slope).abs() <= 1e-6 * (1.0 + slope.abs()),
                "gelu'({v}) = {} vs {slope} (seed {seed})",
                dx[i]
            );
        }
    }
}

//! [`forward_flat`]: a [`Linear`] over the last dimension of a 3-d tensor, as one 2-d product.

use burn::nn::Linear;
use burn::tensor::{Tensor, backend::Backend};

/// `linear` applied to `x` (`[a, b, d_input]` → `[a, b, d_output]`) with its leading two
/// dimensions flattened into rows: the values of `linear.forward(x)`.
///
/// Why: on a 3-d input, Burn 0.21's weight gradient is a batched product, one
/// `[d_input, d_output]` matrix per index of the first dimension, summed afterwards
/// (`linear_weight_backward`). For a temporal batch's `[roots, fanout, d]` neighbour keys that
/// is an `[roots, d_input, d_output]` buffer (1,800 roots × 200 × 100 floats = 144 MB on a
/// batch of 600 events) and products of depth `fanout`. Flat, the gradient is one product of
/// depth `a · b` straight into `[d_input, d_output]`.
pub(crate) fn forward_flat<B: Backend>(linear: &Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let [a, b, d_input] = x.dims();
    let y = linear.forward(x.reshape([a * b, d_input]));
    let d_output = y.dims()[1];
    y.reshape([a, b, d_output])
}

#[cfg(test)]
mod tests {
    use super::forward_flat;
    use crate::temporal::reference::{Rng, read};
    use burn::backend::{Autodiff, Flex};
    use burn::nn::LinearConfig;

    type B = Autodiff<Flex>;

    #[test]
    fn flat_linear_gives_the_values_and_gradients_of_the_batched_one() {
        let device = Default::default();
        let mut rng = Rng::new();
        let linear = LinearConfig::new(5, 3).init::<B>(&device);
        let (x, _) = rng.tensor::<B, 3>([7, 4, 5], &device);
        let run = |flat: bool| {
            let x = x.clone().detach().require_grad();
            let y = if flat { forward_flat(&linear, x.clone()) } else { linear.forward(x.clone()) };
            let values = read(y.clone());
            let grads = (y.clone() * y).sum().backward();
            let weight = read(linear.weight.grad(&grads).expect("weight gradient"));
            let bias = read(linear.bias.as_ref().and_then(|b| b.grad(&grads)).expect("bias gradient"));
            let input = read(x.grad(&grads).expect("input gradient"));
            [values, weight, bias, input]
        };
        let (flat, batched) = (run(true), run(false));
        for (what, (f, b)) in ["values", "weight", "bias", "input"].iter().zip(flat.iter().zip(&batched)) {
            assert_eq!(f.len(), b.len(), "{what} (seed {})", rng.seed);
            for (x, y) in f.iter().zip(b) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{what}: {x} vs {y} (seed {})", rng.seed);
            }
        }
    }
}

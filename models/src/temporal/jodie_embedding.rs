//! JODIE's time projection of the memory (TGL's `JODIETimeEmbedding`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

/// Configuration of a [`JodieTimeEmbedding`].
#[derive(Config, Debug)]
pub struct JodieTimeEmbeddingConfig {
    /// Width of the node representation (the memory width).
    pub dim: usize,
}

/// JODIE's projection of a memory into the future: `h·(1 + w·Δt + b)`, with `w`, `b` learned
/// per feature.
///
/// TGL feeds it `Δt = (t − t_last)/(t + 1)`, the time since the node's last update relative to
/// the query time, which [`TemporalModel`](super::TemporalModel) computes.
#[derive(Module, Debug)]
pub struct JodieTimeEmbedding<B: Backend> {
    /// `Δt ↦ w·Δt + b`, `1 → dim`.
    pub time_projection: Linear<B>,
}

impl JodieTimeEmbeddingConfig {
    /// Initializes a [`JodieTimeEmbedding`] on `device`: `w ~ N(0, 1)` and `b = 0`, so the
    /// projection starts as the identity at `Δt = 0`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> JodieTimeEmbedding<B> {
        let mut time_projection = LinearConfig::new(1, self.dim)
            .with_initializer(Initializer::Normal {
                mean: 0.0,
                std: 1.0,
            })
            .init(device);
        // a fresh parameter: `Param::map` would keep a tensor that no longer tracks gradients
        time_projection.bias = Some(Initializer::Zeros.init([self.dim], device));
        JodieTimeEmbedding { time_projection }
    }
}

impl<B: Backend> JodieTimeEmbedding<B> {
    /// - `h`: `[rows, dim]`
    /// - `delta_t`: normalized time since each row's last update `[rows]`
    /// - output: `[rows, dim]`
    pub fn forward(&self, h: Tensor<B, 2>, delta_t: Tensor<B, 1>) -> Tensor<B, 2> {
        h * (self.time_projection.forward(delta_t.unsqueeze_dim(1)) + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, assert_close, read, tensor, widen};
    use burn::backend::Flex;
    use burn::module::Param;

    #[test]
    fn projection_matches_h_times_one_plus_w_dt_plus_b() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, dim) = (4, 5);
        let mut jodie = JodieTimeEmbeddingConfig::new(dim).init::<Flex>(&device);
        assert!(
            read(
                jodie
                    .time_projection
                    .bias
                    .as_ref()
                    .map_or_else(|| Tensor::zeros([1], &device), |b| b.val())
            )
            .iter()
            .all(|&b| b == 0.0)
        );
        let (bias, b) = rng.tensor::<Flex, 1>([dim], &device);
        jodie.time_projection.bias = Some(Param::from_tensor(bias));
        let (h, h64) = rng.tensor::<Flex, 2>([rows, dim], &device);
        let delta_t = rng.values(rows, 0.0, 1.0);
        let got = read(jodie.forward(h, tensor(delta_t.clone(), [rows], &device)));
        let (w, delta_t) = (read(jodie.time_projection.weight.val()), widen(&delta_t));
        let want: Vec<f64> = (0..rows * dim)
            .map(|i| h64[i] * (1.0 + w[i % dim] * delta_t[i / dim] + b[i % dim]))
            .collect();
        assert_close("JODIE projection", &got, &want, 1e-6, rng.seed);
    }
}

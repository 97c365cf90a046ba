//! Cosine time encoding (TGAT, TGN; TGL's `TimeEncode`).

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};

/// Configuration of a [`TimeEncode`].
#[derive(Config, Debug)]
pub struct TimeEncodeConfig {
    /// Width of the encoding (TGL's `dim_time`).
    pub dim_time: usize,
    /// Whether the frequencies and phases train (TGL, TGAT) or stay at their initial values
    /// (GraphMixer's fixed encoding). Default: true.
    #[config(default = true)]
    pub learnable: bool,
}

/// `cos(Δt·w + b)`, one feature per frequency `w_i`.
///
/// The frequencies start at `w_i = 10^(-9·i/(dim_time-1))` (`1/10^linspace(0, 9, dim_time)`,
/// from 1 down to 1e-9 per time unit) and the phases at `b = 0`, so the encoding of `Δt = 0` is
/// all ones.
#[derive(Module, Debug)]
pub struct TimeEncode<B: Backend> {
    /// Frequencies `w`, `[dim_time]`.
    pub frequency: Param<Tensor<B, 1>>,
    /// Phases `b`, `[dim_time]`.
    pub phase: Param<Tensor<B, 1>>,
    /// Whether `frequency` and `phase` receive gradients.
    pub learnable: bool,
}

impl TimeEncodeConfig {
    /// Initializes a [`TimeEncode`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TimeEncode<B> {
        let dim = self.dim_time;
        let frequency: Vec<f32> = (0..dim)
            .map(|i| {
                let exponent = if dim > 1 {
                    9.0 * i as f64 / (dim - 1) as f64
                } else {
                    0.0
                };
                10f64.powf(-exponent) as f32
            })
            .collect();
        TimeEncode {
            frequency: Param::from_tensor(Tensor::from_data(
                TensorData::new(frequency, [dim]),
                device,
            )),
            phase: Param::from_tensor(Tensor::zeros([dim], device)),
            learnable: self.learnable,
        }
    }
}

impl<B: Backend> TimeEncode<B> {
    /// Width of the encoding.
    pub fn dim_time(&self) -> usize {
        self.frequency.dims()[0]
    }

    /// Encodes time differences of any shape.
    ///
    /// - `delta_t`: `[d_1, …, d_k]`
    /// - output: `[d_1, …, d_k, dim_time]` (`K = k + 1`)
    pub fn forward<const D: usize, const K: usize>(&self, delta_t: Tensor<B, D>) -> Tensor<B, K> {
        let (mut frequency, mut phase) = (self.frequency.val(), self.phase.val());
        if !self.learnable {
            frequency = frequency.detach();
            phase = phase.detach();
        }
        let mut broadcast = [1; K];
        broadcast[K - 1] = self.dim_time();
        let t: Tensor<B, K> = delta_t.unsqueeze_dim(D);
        (t * frequency.reshape(broadcast) + phase.reshape(broadcast)).cos()
    }

    /// `[x || cos(Δt·w + b)]`: `x` `[rows, dim]` and `delta_t` `[rows]` give
    /// `[rows, dim + dim_time]` (the memory updaters' input, a mail and the time since the
    /// node's last update).
    pub fn append(&self, x: Tensor<B, 2>, delta_t: Tensor<B, 1>) -> Tensor<B, 2> {
        Tensor::cat(vec![x, self.forward(delta_t)], 1)
    }

    /// The encoding of `Δt = 0` for `rows` rows (TGL's `zero_time_feat` of a query), `[rows, dim_time]`.
    pub fn zero(&self, rows: usize) -> Tensor<B, 2> {
        let device = self.frequency.device();
        self.forward(Tensor::<B, 1>::zeros([rows], &device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, assert_close, read, tensor, time_encode64, widen};
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn encoding_matches_a_float64_reference() {
        let device = Default::default();
        let mut rng = Rng::new();
        // 10 frequencies: exponents linspace(0, 9, 10) = 0, 1, …, 9
        let encode = TimeEncodeConfig::new(10).init::<Flex>(&device);
        let frequency = read(encode.frequency.val());
        for (i, w) in frequency.iter().enumerate() {
            let want = 10f64.powf(-(i as f64));
            assert!(
                (w - want).abs() <= 1e-6 * want,
                "w[{i}] = {w}, expected {want}"
            );
        }
        let delta_t = rng.values(6 * 5, 0.0, 100.0);
        let got = read(encode.forward::<2, 3>(tensor(delta_t.clone(), [6, 5], &device)));
        assert_close(
            "cos(Δt·w + b)",
            &got,
            &time_encode64(&encode, &widen(&delta_t)),
            1e-4,
            rng.seed,
        );
        assert_close(
            "TimeEncode(0)",
            &read(encode.zero(3)),
            &[1.0; 30],
            0.0,
            rng.seed,
        );
    }

    #[test]
    fn a_fixed_encoding_receives_no_gradient() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let mut rng = Rng::new();
        let mut delta_t = || tensor::<B, 1>(rng.values(4, 0.0, 10.0), [4], &device);
        for learnable in [true, false] {
            let encode = TimeEncodeConfig::new(6)
                .with_learnable(learnable)
                .init::<B>(&device);
            let grads = encode.forward::<1, 2>(delta_t()).sum().backward();
            assert_eq!(
                encode.frequency.grad(&grads).is_some(),
                learnable,
                "learnable = {learnable}"
            );
        }
    }
}

//! JODIE's memory updater: a vanilla RNN cell over `[mail || TimeEncode(Δt)]` (TGL's
//! `RNNMemeoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::tanh;
use burn::tensor::{Tensor, backend::Backend};

use super::{TimeEncode, TimeEncodeConfig};

/// Configuration of a [`RnnMemoryUpdater`].
#[derive(Config, Debug)]
pub struct RnnMemoryUpdaterConfig {
    /// Mail width (`2·dim_memory + dim_edge`).
    pub dim_mail: usize,
    /// Memory width.
    pub dim_memory: usize,
    /// Width of the time encoding of `Δt` appended to the mail. Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
}

/// `h' = tanh(W x + U h)` (each with its bias), `x = [mail || TimeEncode(Δt)]`.
#[derive(Module, Debug)]
pub struct RnnMemoryUpdater<B: Backend> {
    /// `W`, `dim_mail + dim_time → dim_memory`.
    pub input: Linear<B>,
    /// `U`, `dim_memory → dim_memory`.
    pub hidden: Linear<B>,
    /// Encoding of `Δt`.
    pub time_encode: TimeEncode<B>,
}

impl RnnMemoryUpdaterConfig {
    /// Initializes a [`RnnMemoryUpdater`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RnnMemoryUpdater<B> {
        RnnMemoryUpdater {
            input: LinearConfig::new(self.dim_mail + self.dim_time, self.dim_memory).init(device),
            hidden: LinearConfig::new(self.dim_memory, self.dim_memory).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
        }
    }
}

impl<B: Backend> RnnMemoryUpdater<B> {
    /// The new memory rows.
    ///
    /// - `memory`: current memory `[rows, dim_memory]`
    /// - `mail`: each row's mail `[rows, dim_mail]`
    /// - `delta_t`: time since each row's last update `[rows]`
    /// - output: `[rows, dim_memory]`
    pub fn forward(
        &self,
        memory: Tensor<B, 2>,
        mail: Tensor<B, 2>,
        delta_t: Tensor<B, 1>,
    ) -> Tensor<B, 2> {
        tanh(
            self.input.forward(self.time_encode.append(mail, delta_t))
                + self.hidden.forward(memory),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{
        Rng, assert_close, concat64, linear64, read, tensor, time_encode64, widen,
    };
    use burn::backend::Flex;

    #[test]
    fn step_matches_a_float64_rnn_cell() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, dim_mail, dim_memory, dim_time) = (6, 5, 4, 3);
        let rnn = RnnMemoryUpdaterConfig::new(dim_mail, dim_memory)
            .with_dim_time(dim_time)
            .init::<Flex>(&device);
        let (memory, h) = rng.tensor::<Flex, 2>([rows, dim_memory], &device);
        let (mail, m) = rng.tensor::<Flex, 2>([rows, dim_mail], &device);
        let delta_t = rng.values(rows, 0.0, 50.0);
        let got = read(rnn.forward(memory, mail, tensor(delta_t.clone(), [rows], &device)));

        let x = concat64(
            &m,
            dim_mail,
            &time_encode64(&rnn.time_encode, &widen(&delta_t)),
            dim_time,
        );
        let (wx, uh) = (linear64(&rnn.input, &x), linear64(&rnn.hidden, &h));
        let want: Vec<f64> = wx.iter().zip(&uh).map(|(a, b)| (a + b).tanh()).collect();
        assert_close("RNN memory", &got, &want, 1e-5, rng.seed);
    }
}

//! The affine maps a recurrent memory updater (GRU, RNN) applies to its input and its memory.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

use super::{TimeEncode, TimeEncodeConfig};

/// The input of a recurrent memory updater for some rows.
#[derive(Debug, Clone)]
pub struct CellInput<B: Backend> {
    /// Current memory `h`, `[rows, dim_memory]`.
    pub memory: Tensor<B, 2>,
    /// Each row's mail, `[rows, dim_mail]`.
    pub mail: Tensor<B, 2>,
    /// Time since each row's last update, `[rows]`.
    pub delta_t: Tensor<B, 1>,
}

/// Configuration of a [`MemoryCell`]: the widths of a recurrent memory updater.
#[derive(Config, Debug)]
pub struct MemoryCellConfig {
    /// Mail width (TGN: `2·dim_memory + dim_edge`).
    pub dim_mail: usize,
    /// Memory width.
    pub dim_memory: usize,
    /// Width of the time encoding of `Δt` appended to the mail (TGL's `dim_time`). Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
}

/// `W x + b_W` and `U h + b_U` for the input `x = [mail || TimeEncode(Δt)]` and the memory `h`,
/// each with `gates` blocks of `dim_memory` features (3 for a GRU, 1 for an RNN).
#[derive(Module, Debug)]
pub struct MemoryCell<B: Backend> {
    /// `W`, `dim_mail + dim_time → gates·dim_memory`.
    pub input: Linear<B>,
    /// `U`, `dim_memory → gates·dim_memory`.
    pub hidden: Linear<B>,
    /// Encoding of `Δt`.
    pub time_encode: TimeEncode<B>,
}

impl MemoryCellConfig {
    /// Initializes a [`MemoryCell`] with `gates` blocks on `device`.
    pub fn init<B: Backend>(&self, gates: usize, device: &B::Device) -> MemoryCell<B> {
        let width = gates * self.dim_memory;
        MemoryCell {
            input: LinearConfig::new(self.dim_mail + self.dim_time, width).init(device),
            hidden: LinearConfig::new(self.dim_memory, width).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
        }
    }
}

impl<B: Backend> MemoryCell<B> {
    /// `(W x + b_W, U h + b_U)` of `input`, each `[rows, gates·dim_memory]`.
    pub fn forward(&self, input: CellInput<B>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let x = self.time_encode.append(input.mail, input.delta_t);
        (self.input.forward(x), self.hidden.forward(input.memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{
        Rng, assert_close, concat64, linear64, read, sigmoid64, tensor, time_encode64, widen,
    };
    use crate::temporal::{GruMemoryUpdaterConfig, RnnMemoryUpdaterConfig};
    use burn::backend::Flex;

    /// `(W x + b_W, U h + b_U)` of `cell` in float64, for `h` and `x = [mail || TimeEncode(Δt)]`.
    fn affine64(
        cell: &MemoryCell<Flex>,
        h: &[f64],
        mail: &[f64],
        delta_t: &[f64],
    ) -> (Vec<f64>, Vec<f64>) {
        let dim_time = cell.time_encode.dim_time();
        let dim_mail = cell.input.weight.dims()[0] - dim_time;
        let x = concat64(
            mail,
            dim_mail,
            &time_encode64(&cell.time_encode, delta_t),
            dim_time,
        );
        (linear64(&cell.input, &x), linear64(&cell.hidden, h))
    }

    #[test]
    fn gru_and_rnn_steps_match_float64_cells() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, dim_mail, dim) = (5, 7, 4);
        let config = MemoryCellConfig::new(dim_mail, dim).with_dim_time(3);
        let gru = GruMemoryUpdaterConfig::new(config.clone()).init::<Flex>(&device);
        let rnn = RnnMemoryUpdaterConfig::new(config).init::<Flex>(&device);
        let (memory, h) = rng.tensor::<Flex, 2>([rows, dim], &device);
        let (mail, m) = rng.tensor::<Flex, 2>([rows, dim_mail], &device);
        let delta_t = rng.values(rows, 0.0, 50.0);
        let input = CellInput {
            memory,
            mail,
            delta_t: tensor::<Flex, 1>(delta_t.clone(), [rows], &device),
        };
        let delta_t = widen(&delta_t);

        let got = read(gru.forward(input.clone()));
        let (gx, gh) = affine64(&gru.cell, &h, &m, &delta_t);
        let want: Vec<f64> = (0..rows * dim)
            .map(|i| {
                let (r, c) = (i / dim, i % dim);
                let at = |gates: &[f64], part: usize| gates[r * 3 * dim + part * dim + c];
                let reset = sigmoid64(at(&gx, 0) + at(&gh, 0));
                let update = sigmoid64(at(&gx, 1) + at(&gh, 1));
                let candidate = (at(&gx, 2) + reset * at(&gh, 2)).tanh();
                (1.0 - update) * candidate + update * h[i]
            })
            .collect();
        assert_close("GRU memory", &got, &want, 1e-5, rng.seed);

        let got = read(rnn.forward(input));
        let (wx, uh) = affine64(&rnn.cell, &h, &m, &delta_t);
        let want: Vec<f64> = wx.iter().zip(&uh).map(|(a, b)| (a + b).tanh()).collect();
        assert_close("RNN memory", &got, &want, 1e-5, rng.seed);
    }
}

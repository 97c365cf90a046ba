//! TGN's memory updater: a GRU cell over `[mail || TimeEncode(Δt)]` (TGL's `GRUMemeoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{sigmoid, tanh};
use burn::tensor::{Tensor, backend::Backend};

use super::{TimeEncode, TimeEncodeConfig};

/// Configuration of a [`GruMemoryUpdater`].
#[derive(Config, Debug)]
pub struct GruMemoryUpdaterConfig {
    /// Mail width (TGN: `2·dim_memory + dim_edge`).
    pub dim_mail: usize,
    /// Memory width.
    pub dim_memory: usize,
    /// Width of the time encoding of `Δt` appended to the mail (TGL's `dim_time`). Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
}

/// The new memory of a node is a GRU cell's step from its memory, on the input
/// `x = [mail || TimeEncode(Δt)]`, `Δt` the time since the node's last update:
///
/// ```text
/// r = σ(W_r x + U_r h),  z = σ(W_z x + U_z h),  n = tanh(W_n x + r ⊙ (U_n h)),
/// h' = (1 − z) ⊙ n + z ⊙ h
/// ```
///
/// (each `W`, `U` with its bias; the reset gate multiplies `U_n h + b`, as PyTorch's `GRUCell`).
#[derive(Module, Debug)]
pub struct GruMemoryUpdater<B: Backend> {
    /// The input maps `W_r, W_z, W_n` side by side, `dim_mail + dim_time → 3·dim_memory`.
    pub input: Linear<B>,
    /// The memory maps `U_r, U_z, U_n` side by side, `dim_memory → 3·dim_memory`.
    pub hidden: Linear<B>,
    /// Encoding of `Δt`.
    pub time_encode: TimeEncode<B>,
}

impl GruMemoryUpdaterConfig {
    /// Initializes a [`GruMemoryUpdater`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GruMemoryUpdater<B> {
        GruMemoryUpdater {
            input: LinearConfig::new(self.dim_mail + self.dim_time, 3 * self.dim_memory)
                .init(device),
            hidden: LinearConfig::new(self.dim_memory, 3 * self.dim_memory).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
        }
    }
}

impl<B: Backend> GruMemoryUpdater<B> {
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
        let dim = memory.dims()[1];
        let gates_x = self.input.forward(self.time_encode.append(mail, delta_t));
        let gates_h = self.hidden.forward(memory.clone());
        let part = |t: &Tensor<B, 2>, i: usize| t.clone().narrow(1, i * dim, dim);
        let reset = sigmoid(part(&gates_x, 0) + part(&gates_h, 0));
        let update = sigmoid(part(&gates_x, 1) + part(&gates_h, 1));
        let candidate = tanh(part(&gates_x, 2) + reset * part(&gates_h, 2));
        candidate * (update.clone().neg() + 1.0) + update * memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{
        Rng, assert_close, concat64, linear64, read, sigmoid64, tensor, time_encode64, widen,
    };
    use burn::backend::Flex;

    #[test]
    fn step_matches_a_float64_gru_cell() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, dim_mail, dim_memory, dim_time) = (5, 7, 4, 3);
        let gru = GruMemoryUpdaterConfig::new(dim_mail, dim_memory)
            .with_dim_time(dim_time)
            .init::<Flex>(&device);
        let (memory, h) = rng.tensor::<Flex, 2>([rows, dim_memory], &device);
        let (mail, m) = rng.tensor::<Flex, 2>([rows, dim_mail], &device);
        let delta_t = rng.values(rows, 0.0, 50.0);
        let got = read(gru.forward(memory, mail, tensor(delta_t.clone(), [rows], &device)));

        let x = concat64(
            &m,
            dim_mail,
            &time_encode64(&gru.time_encode, &widen(&delta_t)),
            dim_time,
        );
        let (gx, gh) = (linear64(&gru.input, &x), linear64(&gru.hidden, &h));
        let want: Vec<f64> = (0..rows * dim_memory)
            .map(|i| {
                let (r, c) = (i / dim_memory, i % dim_memory);
                let at =
                    |gates: &[f64], part: usize| gates[r * 3 * dim_memory + part * dim_memory + c];
                let reset = sigmoid64(at(&gx, 0) + at(&gh, 0));
                let update = sigmoid64(at(&gx, 1) + at(&gh, 1));
                let candidate = (at(&gx, 2) + reset * at(&gh, 2)).tanh();
                (1.0 - update) * candidate + update * h[i]
            })
            .collect();
        assert_close("GRU memory", &got, &want, 1e-5, rng.seed);
    }
}

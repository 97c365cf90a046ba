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
    pub fn forward(&self, memory: Tensor<B, 2>, mail: Tensor<B, 2>, delta_t: Tensor<B, 1>) -> Tensor<B, 2> {
        tanh(self.input.forward(self.time_encode.append(mail, delta_t)) + self.hidden.forward(memory))
    }
}

//! JODIE's memory updater: a vanilla RNN cell over `[mail || TimeEncode(Δt)]` (TGL's
//! `RNNMemeoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::activation::tanh;
use burn::tensor::{Tensor, backend::Backend};

use super::{CellInput, MemoryCell, MemoryCellConfig};

/// Configuration of a [`RnnMemoryUpdater`].
#[derive(Config, Debug)]
pub struct RnnMemoryUpdaterConfig {
    /// The widths: mail, memory and time encoding.
    pub cell: MemoryCellConfig,
}

/// `h' = tanh(W x + U h)` (each with its bias), `x = [mail || TimeEncode(Δt)]`.
#[derive(Module, Debug)]
pub struct RnnMemoryUpdater<B: Backend> {
    /// `W` and `U` (one gate).
    pub cell: MemoryCell<B>,
}

impl RnnMemoryUpdaterConfig {
    /// Initializes a [`RnnMemoryUpdater`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RnnMemoryUpdater<B> {
        RnnMemoryUpdater {
            cell: self.cell.init(1, device),
        }
    }
}

impl<B: Backend> RnnMemoryUpdater<B> {
    /// The new memory rows `tanh(W x + U h)`, `[rows, dim_memory]`.
    pub fn forward(&self, input: CellInput<B>) -> Tensor<B, 2> {
        let (input, hidden) = self.cell.forward(input);
        tanh(input + hidden)
    }
}

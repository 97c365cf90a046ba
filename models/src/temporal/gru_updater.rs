//! TGN's memory updater: a GRU cell over `[mail || TimeEncode(Δt)]` (TGL's `GRUMemeoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::activation::{sigmoid, tanh};
use burn::tensor::{Tensor, backend::Backend};

use super::{CellInput, MemoryCell, MemoryCellConfig};

/// Configuration of a [`GruMemoryUpdater`].
#[derive(Config, Debug)]
pub struct GruMemoryUpdaterConfig {
    /// The widths: mail, memory and time encoding.
    pub cell: MemoryCellConfig,
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
    /// `W_r, W_z, W_n` and `U_r, U_z, U_n`, each side by side (3 gates).
    pub cell: MemoryCell<B>,
}

impl GruMemoryUpdaterConfig {
    /// Initializes a [`GruMemoryUpdater`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GruMemoryUpdater<B> {
        GruMemoryUpdater {
            cell: self.cell.init(3, device),
        }
    }
}

impl<B: Backend> GruMemoryUpdater<B> {
    /// The new memory rows, `[rows, dim_memory]`.
    pub fn forward(&self, input: CellInput<B>) -> Tensor<B, 2> {
        let (dim, memory) = (input.memory.dims()[1], input.memory.clone());
        let (gates_x, gates_h) = self.cell.forward(input);
        let part = |t: &Tensor<B, 2>, i: usize| t.clone().narrow(1, i * dim, dim);
        let reset = sigmoid(part(&gates_x, 0) + part(&gates_h, 0));
        let update = sigmoid(part(&gates_x, 1) + part(&gates_h, 1));
        let candidate = tanh(part(&gates_x, 2) + reset * part(&gates_h, 2));
        candidate * (update.clone().neg() + 1.0) + update * memory
    }
}

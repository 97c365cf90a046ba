//! The memory as the embedding (JODIE, APAN; TGL's `IdentityNormLayer`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::{Tensor, backend::Backend};

/// Configuration of an [`IdentityEmbedding`].
#[derive(Config, Debug)]
pub struct IdentityEmbeddingConfig {
    /// Width of the node representation (the memory width).
    pub dim: usize,
}

/// A node's embedding is its (updated) memory, layer-normalized as TGL's `IdentityNormLayer`
/// does: no neighbours are read.
#[derive(Module, Debug)]
pub struct IdentityEmbedding<B: Backend> {
    /// The norm, `dim`.
    pub layer_norm: LayerNorm<B>,
}

impl IdentityEmbeddingConfig {
    /// Initializes an [`IdentityEmbedding`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> IdentityEmbedding<B> {
        IdentityEmbedding {
            layer_norm: LayerNormConfig::new(self.dim).init(device),
        }
    }
}

impl<B: Backend> IdentityEmbedding<B> {
    /// `h`: `[rows, dim]` → `[rows, dim]`.
    pub fn forward(&self, h: Tensor<B, 2>) -> Tensor<B, 2> {
        self.layer_norm.forward(h)
    }
}

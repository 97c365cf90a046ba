use burn::config::Config;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};
use megagraph_kernels::{AttentionBias, DistanceBias, GraphAttentionBackend};

use crate::activation::ExactGelu;
use crate::{Attend, FastDropout, FastDropoutConfig, GraphAttention, GraphAttentionConfig, LocalAttention, spatial_bias};

/// Configuration of a [`GraphTransformerLayer`].
#[derive(Config, Debug)]
pub struct GraphTransformerLayerConfig {
    /// Model width.
    pub d_model: usize,
    /// Number of attention heads.
    pub num_heads: usize,
    /// Hidden width of the feed-forward network.
    pub ffn_hidden: usize,
    /// Dropout after attention and after the feed-forward network. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Key tile of the attention op. Default: 128.
    #[config(default = 128)]
    pub block_size: usize,
}

/// A pre-LN Graph Transformer layer:
/// `x + Dropout(Attn(LN(x), bias))`, then `x + Dropout(FFN(LN(x)))` with a GELU FFN.
#[derive(Module, Debug)]
pub struct GraphTransformerLayer<B: Backend> {
    /// Norm before attention.
    pub attention_norm: LayerNorm<B>,
    /// Biased multi-head attention.
    pub attention: GraphAttention<B>,
    /// Norm before the feed-forward network.
    pub ffn_norm: LayerNorm<B>,
    /// First FFN projection, `d_model → ffn_hidden`.
    pub ffn_in: Linear<B>,
    /// Second FFN projection, `ffn_hidden → d_model`.
    pub ffn_out: Linear<B>,
    /// FFN activation (GELU with the exact derivative on every backend).
    pub activation: ExactGelu,
    /// Residual-branch and FFN dropout (a fresh mask per call, so per use and per layer).
    pub dropout: FastDropout,
}

impl GraphTransformerLayerConfig {
    /// Initializes a [`GraphTransformerLayer`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GraphTransformerLayer<B> {
        GraphTransformerLayer {
            attention_norm: LayerNormConfig::new(self.d_model).init(device),
            attention: GraphAttentionConfig::new(self.d_model, self.num_heads)
                .with_block_size(self.block_size)
                .init(device),
            ffn_norm: LayerNormConfig::new(self.d_model).init(device),
            ffn_in: LinearConfig::new(self.d_model, self.ffn_hidden).init(device),
            ffn_out: LinearConfig::new(self.ffn_hidden, self.d_model).init(device),
            activation: ExactGelu::new(),
            dropout: FastDropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: GraphAttentionBackend> GraphTransformerLayer<B> {
    /// Applies the layer on one device ([`LocalAttention`]).
    ///
    /// - `x`: `[batch, seq, d_model]`
    /// - `bias`: the spatial bias of the batch
    /// - `padding`: `[batch, seq]`, `true` for padded positions
    /// - output: `[batch, seq, d_model]`
    ///
    /// # Panics
    ///
    /// If the shapes of `x`, `bias` and `padding` disagree.
    pub fn forward(&self, x: Tensor<B, 3>, bias: DistanceBias<B>, padding: Tensor<B, 2, Bool>) -> Tensor<B, 3> {
        self.forward_with(x, spatial_bias(bias, padding), &LocalAttention, 0)
            .unwrap_or_else(|err| panic!("graph attention on inconsistent shapes: {err}"))
    }
}

impl<B: Backend> GraphTransformerLayer<B> {
    /// Applies the layer to this device's rows with the attention core `attend`; the norms,
    /// projections, FFN and dropout are the same on every core. Arguments as
    /// [`GraphAttention::forward_with`].
    pub fn forward_with<A: Attend<B>>(&self, x: Tensor<B, 3>, bias: AttentionBias<B>, attend: &A, layer: usize) -> Result<Tensor<B, 3>, A::Error> {
        let normed = self.attention_norm.forward(x.clone());
        let attended = self.attention.forward_with(normed, bias, attend, layer)?;
        let x = x + self.dropout.forward(attended);
        let hidden = self.activation.forward(self.ffn_in.forward(self.ffn_norm.forward(x.clone())));
        Ok(x + self.dropout.forward(self.ffn_out.forward(self.dropout.forward(hidden))))
    }
}

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, GraphAttentionBackend};

use crate::{Attend, AttendInputs, LocalAttention, spatial_bias};

/// Configuration of a [`GraphAttention`] layer.
#[derive(Config, Debug)]
pub struct GraphAttentionConfig {
    /// Model width; must be a multiple of `num_heads`.
    pub d_model: usize,
    /// Number of attention heads.
    pub num_heads: usize,
    /// Key tile of the blockwise attention op. Default: 128.
    #[config(default = 128)]
    pub block_size: usize,
}

/// Multi-head self-attention whose logits get the spatial bias of a [`DistanceBias`], computed by
/// the exact blockwise op of `megagraph-kernels`.
#[derive(Module, Debug)]
pub struct GraphAttention<B: Backend> {
    /// Query projection, `d_model → d_model`.
    pub query: Linear<B>,
    /// Key projection, `d_model → d_model`.
    pub key: Linear<B>,
    /// Value projection, `d_model → d_model`.
    pub value: Linear<B>,
    /// Output projection, `d_model → d_model`.
    pub output: Linear<B>,
    /// Number of heads.
    pub num_heads: usize,
    /// Key tile of the attention op.
    pub block_size: usize,
}

impl GraphAttentionConfig {
    /// Initializes a [`GraphAttention`] layer on `device`.
    ///
    /// # Panics
    ///
    /// If `d_model` is not a multiple of `num_heads`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GraphAttention<B> {
        assert!(
            self.num_heads > 0 && self.d_model.is_multiple_of(self.num_heads),
            "d_model ({}) must be a multiple of num_heads ({})",
            self.d_model,
            self.num_heads
        );
        let linear = || LinearConfig::new(self.d_model, self.d_model).init(device);
        GraphAttention {
            query: linear(),
            key: linear(),
            value: linear(),
            output: linear(),
            num_heads: self.num_heads,
            block_size: self.block_size,
        }
    }
}

impl<B: GraphAttentionBackend> GraphAttention<B> {
    /// Biased self-attention on one device ([`LocalAttention`]).
    ///
    /// - `x`: `[batch, seq, d_model]`
    /// - `bias`: distance index `[batch, seq, seq]` and table `[buckets, heads]`
    /// - `padding`: `[batch, seq]`, `true` for padded keys
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

impl<B: Backend> GraphAttention<B> {
    /// Biased self-attention of this device's rows through the attention core `attend`: the
    /// projections around it are the layer's own whatever the core.
    ///
    /// `x` and the output are this device's rows, `[batch, rows, d_model]`; `bias` holds their
    /// bias over every key column and the mask of this device's keys ([`spatial_bias`]);
    /// `layer` is the calling layer's global index (see [`Attend::attend`]). Errors are
    /// `attend`'s.
    pub fn forward_with<A: Attend<B>>(&self, x: Tensor<B, 3>, bias: AttentionBias<B>, attend: &A, layer: usize) -> Result<Tensor<B, 3>, A::Error> {
        let [batch, seq, d_model] = x.dims();
        let head_dim = d_model / self.num_heads;
        let heads = |t: Tensor<B, 3>| t.reshape([batch, seq, self.num_heads, head_dim]).swap_dims(1, 2);
        let q = heads(self.query.forward(x.clone()));
        let k = heads(self.key.forward(x.clone()));
        let v = heads(self.value.forward(x));
        let options = AttentionOptions {
            scale: None,
            block_size: self.block_size,
        };
        let attended = attend.attend(AttendInputs { q, k, v, bias, options }, layer)?;
        Ok(self
            .output
            .forward(attended.swap_dims(1, 2).reshape([batch, seq, d_model])))
    }
}

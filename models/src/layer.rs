use burn::config::Config;
use burn::module::{Module, Param};
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
    /// LayerScale (CaiT): each residual branch is multiplied by a learned per-channel vector
    /// that starts at this value, so that a small value starts the layer near the identity.
    /// Default: `None` (off).
    pub layer_scale: Option<f64>,
}

/// A pre-LN Graph Transformer layer:
/// `x + Dropout(Attn(LN(x), bias))`, then `x + Dropout(FFN(LN(x)))` with a GELU FFN; with
/// LayerScale each branch's output is first multiplied by its learned per-channel scale.
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
    /// LayerScale of the attention branch, `[d_model]` (see
    /// [`GraphTransformerLayerConfig::layer_scale`]).
    pub attention_scale: Option<Param<Tensor<B, 1>>>,
    /// LayerScale of the feed-forward branch, `[d_model]`.
    pub ffn_scale: Option<Param<Tensor<B, 1>>>,
}

impl GraphTransformerLayerConfig {
    /// Initializes a [`GraphTransformerLayer`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GraphTransformerLayer<B> {
        let scale = || self.layer_scale.map(|value| Param::from_tensor(Tensor::full([self.d_model], value, device)));
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
            attention_scale: scale(),
            ffn_scale: scale(),
        }
    }
}

/// `branch` times `scale` per channel, or `branch` without a scale.
fn scaled<B: Backend>(branch: Tensor<B, 3>, scale: &Option<Param<Tensor<B, 1>>>) -> Tensor<B, 3> {
    match scale {
        Some(scale) => branch * scale.val().unsqueeze::<3>(),
        None => branch,
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
        let x = x + self.dropout.forward(scaled(attended, &self.attention_scale));
        let hidden = self.activation.forward(self.ffn_in.forward(self.ffn_norm.forward(x.clone())));
        let fed = self.ffn_out.forward(self.dropout.forward(hidden));
        Ok(x + self.dropout.forward(scaled(fed, &self.ffn_scale)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoders::SpatialEncodingConfig;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::{Distribution, TensorData};

    type B = Autodiff<Flex>;

    /// A layer without dropout (key tiles of 2), a random input `[1, 5, 8]`, and the spatial
    /// bias of random distances with no padding.
    fn setup(layer_scale: Option<f64>) -> (GraphTransformerLayer<B>, Tensor<B, 3>, DistanceBias<B>, Tensor<B, 2, Bool>) {
        let device = Default::default();
        let layer = GraphTransformerLayerConfig::new(8, 2, 16)
            .with_dropout(0.0)
            .with_block_size(2)
            .with_layer_scale(layer_scale)
            .init::<B>(&device);
        let x = Tensor::random([1, 5, 8], Distribution::Normal(0.0, 1.0), &device);
        let distances: Vec<u8> = (0..25u8).map(|i| (i * 7 + i / 5) % 4).collect();
        let index = DistanceBias::<B>::index_from_u8(distances, [1, 5, 5], &device).expect("index");
        let bias = SpatialEncodingConfig::new(4, 2).init::<B>(&device).bias(index);
        let padding = Tensor::<B, 2>::zeros([1, 5], &device).equal_elem(1.0);
        (layer, x, bias, padding)
    }

    /// `layer` with both scales set to `value` in every channel.
    fn with_scales(mut layer: GraphTransformerLayer<B>, value: f32) -> GraphTransformerLayer<B> {
        let device = Default::default();
        let full = || Some(Param::from_tensor(Tensor::from_data(TensorData::new(vec![value; 8], [8]), &device)));
        layer.attention_scale = full();
        layer.ffn_scale = full();
        layer
    }

    fn values(t: Tensor<B, 3>) -> Vec<f32> {
        t.into_data().iter::<f32>().collect()
    }

    #[test]
    fn layer_scale_multiplies_each_residual_branch() {
        let (plain, x, bias, padding) = setup(None);
        assert!(plain.attention_scale.is_none() && plain.ffn_scale.is_none());
        let (scaled_layer, ..) = setup(Some(0.1));
        let scale = scaled_layer.attention_scale.as_ref().expect("attention scale").val();
        assert_eq!(scale.into_data().iter::<f32>().collect::<Vec<_>>(), vec![0.1; 8]);
        // scales of 1 leave the layer as it was, scales of 0 make it the identity
        let want = values(plain.forward(x.clone(), bias.clone(), padding.clone()));
        let ones = with_scales(plain.clone(), 1.0);
        for (got, want) in values(ones.forward(x.clone(), bias.clone(), padding.clone())).iter().zip(&want) {
            assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "{got} vs {want}");
        }
        let zeros = with_scales(plain.clone(), 0.0);
        assert_eq!(values(zeros.forward(x.clone(), bias.clone(), padding.clone())), values(x.clone()));
        // a scale of s on the attention branch alone: x + s·Attn(LN(x)) in float64, then the
        // FFN branch at 0
        let mut half = with_scales(plain.clone(), 0.0);
        half.attention_scale = with_scales(plain.clone(), 0.5).attention_scale;
        let attended = values(plain.attention.forward_with(plain.attention_norm.forward(x.clone()), spatial_bias(bias.clone(), padding.clone()), &LocalAttention, 0).expect("attention"));
        let got = values(half.forward(x.clone(), bias.clone(), padding.clone()));
        for ((g, a), x) in got.iter().zip(&attended).zip(values(x.clone())) {
            let want = f64::from(x) + 0.5 * f64::from(*a);
            assert!((f64::from(*g) - want).abs() <= 1e-6 * (1.0 + want.abs()), "{g} vs {want}");
        }
    }

    #[test]
    fn layer_scales_are_learned() {
        let (layer, x, bias, padding) = setup(Some(0.1));
        let grads = layer.forward(x, bias, padding).powf_scalar(2.0).sum().backward();
        for scale in [&layer.attention_scale, &layer.ffn_scale] {
            let grad = scale.as_ref().expect("scale").grad(&grads).expect("a gradient");
            let norm: f32 = grad.into_data().iter::<f32>().map(|g| g * g).sum();
            assert!(norm > 0.0, "zero gradient");
        }
    }
}

//! One layer of temporal graph attention (TGAT, TGN; TGL's `TransfomerAttentionLayer`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::masked_attention::attend_keys;
use super::{TimeEncode, TimeEncodeConfig};

/// Configuration of a [`TemporalAttentionLayer`].
#[derive(Config, Debug)]
pub struct TemporalAttentionLayerConfig {
    /// Width of the node representations read (roots and neighbours).
    pub dim_node: usize,
    /// Width of the edge features; 0 for none.
    pub dim_edge: usize,
    /// Width of the time encoding. Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
    /// Output width; a multiple of `att_head`. Default: 100.
    #[config(default = 100)]
    pub dim_out: usize,
    /// Attention heads. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the attention weights and on the output. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// Temporal graph attention of each root over its sampled neighbours:
///
/// ```text
/// q   = W_q [h_root || TimeEncode(0)]
/// k_j = W_k [h_j || e_j || TimeEncode(t_root − t_j)],  v_j = W_v [same]
/// a   = Σ_j softmax_j(LeakyReLU(q·k_j)) v_j          (per head; padded neighbours masked)
/// out = LayerNorm(ReLU(dropout(W_o [a || h_root])))
/// ```
///
/// `t_j` is the time of the edge to neighbour `j`. A root with no neighbour gets `a = 0`, so its
/// output depends on `h_root` alone.
#[derive(Module, Debug)]
pub struct TemporalAttentionLayer<B: Backend> {
    /// `W_q`, `dim_node + dim_time → dim_out`.
    pub query: Linear<B>,
    /// `W_k`, `dim_node + dim_edge + dim_time → dim_out`.
    pub key: Linear<B>,
    /// `W_v`, `dim_node + dim_edge + dim_time → dim_out`.
    pub value: Linear<B>,
    /// `W_o`, `dim_out + dim_node → dim_out`.
    pub output: Linear<B>,
    /// Norm of the output, `dim_out`.
    pub layer_norm: LayerNorm<B>,
    /// Encoding of edge ages.
    pub time_encode: TimeEncode<B>,
    /// Dropout on the attention weights and the output.
    pub dropout: Dropout,
    /// Number of heads.
    pub att_head: usize,
}

impl TemporalAttentionLayerConfig {
    /// Initializes a [`TemporalAttentionLayer`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim_out` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TemporalAttentionLayer<B> {
        assert!(
            self.att_head > 0 && self.dim_out.is_multiple_of(self.att_head),
            "dim_out ({}) must be a multiple of att_head ({})",
            self.dim_out,
            self.att_head
        );
        let dim_key = self.dim_node + self.dim_edge + self.dim_time;
        TemporalAttentionLayer {
            query: LinearConfig::new(self.dim_node + self.dim_time, self.dim_out).init(device),
            key: LinearConfig::new(dim_key, self.dim_out).init(device),
            value: LinearConfig::new(dim_key, self.dim_out).init(device),
            output: LinearConfig::new(self.dim_out + self.dim_node, self.dim_out).init(device),
            layer_norm: LayerNormConfig::new(self.dim_out).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            att_head: self.att_head,
        }
    }
}

impl<B: Backend> TemporalAttentionLayer<B> {
    /// New representations of the roots.
    ///
    /// - `root`: `[roots, dim_node]`
    /// - `neighbours`: `[roots, fanout, dim_node]`
    /// - `edge_feat`: `[roots, fanout, dim_edge]`, `None` when `dim_edge = 0`
    /// - `delta_t`: `t_root − t_edge`, `[roots, fanout]`
    /// - `padding`: `[roots, fanout]`, `true` for slots without a neighbour
    /// - output: `[roots, dim_out]`
    pub fn forward(
        &self,
        root: Tensor<B, 2>,
        neighbours: Tensor<B, 3>,
        edge_feat: Option<Tensor<B, 3>>,
        delta_t: Tensor<B, 2>,
        padding: Tensor<B, 2, Bool>,
    ) -> Tensor<B, 2> {
        let roots = root.dims()[0];
        let query = Tensor::cat(vec![root.clone(), self.time_encode.zero(roots)], 1);
        let mut key = vec![neighbours];
        key.extend(edge_feat);
        key.push(self.time_encode.forward(delta_t));
        let key = Tensor::cat(key, 2);
        let attended = attend_keys(
            self.query.forward(query),
            self.key.forward(key.clone()),
            self.value.forward(key),
            padding,
            self.att_head,
            &self.dropout,
        );
        let output = self.output.forward(Tensor::cat(vec![attended, root], 1));
        self.layer_norm.forward(relu(self.dropout.forward(output)))
    }
}

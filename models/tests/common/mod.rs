//! Helpers shared by the model tests (each test file uses the ones it needs).
#![allow(dead_code)]

use burn::nn::Linear;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use megagraph_models::{GraphAttention, GraphTransformerConfig};

/// The values of `t` as `f64`, row-major.
pub fn values<BK: Backend, const D: usize>(t: Tensor<BK, D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Asserts `|got - want| <= tolerance · (1 + |want|)` elementwise, naming `what` and the index.
pub fn assert_close(got: &[f64], want: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tolerance * (1.0 + w.abs()), "{what}[{n}]: {g} vs {w}");
    }
}

/// A small model of width `d_model` for 3 classes, without dropout, with key tiles of 4.
pub fn small_model(num_nodes: usize, d_model: usize, heads: usize, max_distance: u8) -> GraphTransformerConfig {
    GraphTransformerConfig::new(num_nodes, 3)
        .with_feature_dim(Some(d_model))
        .with_hidden(d_model)
        .with_ffn_hidden(d_model)
        .with_num_heads(heads)
        .with_max_distance(max_distance)
        .with_dropout(0.0)
        .with_input_dropout(0.0)
        .with_block_size(4)
}

/// `x · weight + bias` of a linear layer in float64, on `[rows, d_in]` row-major.
pub fn linear_f64<BK: Backend>(x: &[f64], layer: &Linear<BK>) -> Vec<f64> {
    let [d_in, d_out] = layer.weight.dims();
    let weight = values(layer.weight.val());
    let bias = layer.bias.as_ref().map_or(vec![0.0; d_out], |b| values(b.val()));
    x.chunks(d_in)
        .flat_map(|row| (0..d_out).map(|o| bias[o] + (0..d_in).map(|i| row[i] * weight[i * d_out + o]).sum::<f64>()))
        .collect()
}

/// The float64 queries, keys and values of `attention` over `nodes` (`[batch, seq, d_model]`
/// row-major, `d_model = token.len()`) with `token` prepended to every sequence, each
/// `[batch, seq + 1, d_model]` row-major.
pub fn token_qkv_f64<BK: Backend>(
    attention: &GraphAttention<BK>,
    nodes: &[f32],
    seq: usize,
    token: &[f64],
) -> [Vec<f64>; 3] {
    let mut x = Vec::with_capacity(nodes.len() / seq * (seq + 1));
    for sequence in nodes.chunks(seq * token.len()) {
        x.extend_from_slice(token);
        x.extend(sequence.iter().map(|&v| f64::from(v)));
    }
    [&attention.query, &attention.key, &attention.value].map(|layer| linear_f64(&x, layer))
}

//! Helpers shared by the model tests (each test file uses the ones it needs).
#![allow(dead_code)]

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use megagraph_models::GraphTransformerConfig;

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

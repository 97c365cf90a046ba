//! The configuration the tests start from.

use megagraph_train::TrainConfig;

/// The synthetic graph (300 nodes, 3 classes, 16 features) in sequences of 64 and a one-layer,
/// two-head model of width 16, without dropout, LayerScale, propagation of the logits or consistency
/// regularization (tests of their own turn those on): small enough to train in a test, and the
/// same model on one device and on a mesh.
pub(crate) fn tiny_config() -> TrainConfig {
    let mut config = TrainConfig::default();
    config.synthetic.nodes = 300;
    config.synthetic.classes = 3;
    config.synthetic.feature_dim = 16;
    config.data.seq_len = 64;
    config.model.layers = Some(1);
    config.model.heads = Some(2);
    config.model.hidden = Some(16);
    config.model.ffn_hidden = Some(16);
    config.model.dropout = 0.0;
    config.model.input_dropout = Some(0.0);
    config.model.key_dropout = Some(0.0);
    config.model.layer_scale = Some(0.0);
    config.model.propagation_steps = Some(0);
    config.training.consistency_weight = Some(0.0);
    config
}

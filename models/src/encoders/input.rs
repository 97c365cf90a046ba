use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

use crate::{FastDropout, FastDropoutConfig, NodeInput};

/// Configuration of an [`InputEncoder`].
#[derive(Config, Debug)]
pub struct InputEncoderConfig {
    /// Model width.
    pub d_model: usize,
    /// Width of the node features; `None` for graphs without features, which then get one learned
    /// embedding per node id.
    pub feature_dim: Option<usize>,
    /// Number of nodes in the graph (used only without features).
    pub num_nodes: usize,
    /// Dropout applied to the raw features before the linear map. Default: 0.0.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// DropNode (GRAND): while training, each node's whole encoded input is zeroed with this
    /// probability and the others scaled by `1 / (1 - p)`, so that a dropped node is known only
    /// through its structural encodings and the nodes it attends to. Default: 0.0.
    #[config(default = 0.0)]
    pub node_dropout: f64,
}

/// Maps each node to a `d_model` vector: a linear map of its features, or a learned embedding of
/// its id when the graph has no features.
#[derive(Module, Debug)]
pub struct InputEncoder<B: Backend> {
    /// Linear map of node features (graphs with features).
    pub linear: Option<Linear<B>>,
    /// Node-id embeddings (graphs without features).
    pub embedding: Option<Embedding<B>>,
    /// Dropout on the raw features (one bool mask of the input's shape per call).
    pub dropout: FastDropout,
    /// DropNode on the encoded rows (one bool mask of `[batch, seq, 1]` per call).
    pub node_dropout: FastDropout,
}

impl InputEncoderConfig {
    /// Initializes an [`InputEncoder`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> InputEncoder<B> {
        let (linear, embedding) = match self.feature_dim {
            Some(dim) => (Some(LinearConfig::new(dim, self.d_model).init(device)), None),
            None => (
                None,
                Some(
                    EmbeddingConfig::new(self.num_nodes.max(1), self.d_model)
                        .with_initializer(Initializer::Normal { mean: 0.0, std: 0.02 })
                        .init(device),
                ),
            ),
        };
        InputEncoder {
            linear,
            embedding,
            dropout: FastDropoutConfig::new(self.dropout).init(),
            node_dropout: FastDropoutConfig::new(self.node_dropout).init(),
        }
    }
}

impl<B: Backend> InputEncoder<B> {
    /// Encodes node inputs.
    ///
    /// - input: features `[batch, seq, feature_dim]` or ids `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    ///
    /// # Panics
    ///
    /// If the input kind does not match the configuration (features given to an encoder built
    /// without `feature_dim`, or ids given to one built with it).
    pub fn forward(&self, input: NodeInput<B>) -> Tensor<B, 3> {
        let encoded = self.encode(input);
        if self.node_dropout.prob == 0.0 {
            return encoded;
        }
        let [batch, seq, _] = encoded.dims();
        // 0 for a dropped node, 1 / (1 - p) for the others; the identity outside training
        let keep = self.node_dropout.forward(Tensor::ones([batch, seq, 1], &encoded.device()));
        encoded * keep
    }

    /// The squared norm `‖W‖²` of the weights that map the input (the linear map's weight, or
    /// the node-id embeddings), `[1]`: what an L2 penalty of the input projection reads.
    pub fn weight_squared_norm(&self) -> Tensor<B, 1> {
        match (&self.linear, &self.embedding) {
            (Some(linear), _) => linear.weight.val().powi_scalar(2).sum(),
            (None, Some(embedding)) => embedding.weight.val().powi_scalar(2).sum(),
            (None, None) => unreachable!("an input encoder has a linear map or embeddings"),
        }
    }

    /// The encoded rows before DropNode.
    fn encode(&self, input: NodeInput<B>) -> Tensor<B, 3> {
        match (input, &self.linear, &self.embedding) {
            (NodeInput::Features(features), Some(linear), _) => linear.forward(self.dropout.forward(features)),
            (NodeInput::Ids(ids), _, Some(embedding)) => embedding.forward(ids),
            (NodeInput::Features(_), None, _) => {
                panic!("node features given to an input encoder configured without feature_dim")
            }
            (NodeInput::Ids(_), _, None) => panic!("node ids given to an input encoder configured with features"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::module::AutodiffModule;
    use burn::tensor::Distribution;

    type B = Autodiff<Flex>;

    #[test]
    fn drop_node_zeroes_whole_rows_and_scales_the_others_while_training_only() {
        let device = Default::default();
        let prob = 0.4;
        let config = InputEncoderConfig::new(6, 0).with_feature_dim(Some(5));
        let plain = config.init::<B>(&device);
        let features = Tensor::<B, 3>::random([4, 50, 5], Distribution::Normal(0.0, 1.0), &device);
        let want: Vec<f32> = plain.forward(NodeInput::Features(features.clone())).into_data().iter::<f32>().collect();
        // the same (now initialized) weights with DropNode
        let dropping = InputEncoder {
            node_dropout: FastDropoutConfig::new(prob).init(),
            ..plain
        };
        let got: Vec<f32> = dropping.forward(NodeInput::Features(features.clone())).into_data().iter::<f32>().collect();
        let mut dropped = 0;
        for (row, (got, want)) in got.chunks(6).zip(want.chunks(6)).enumerate() {
            if got.iter().all(|&v| v == 0.0) {
                dropped += 1;
                continue;
            }
            for (g, w) in got.iter().zip(want) {
                let scaled = w / (1.0 - prob as f32);
                assert!((g - scaled).abs() <= 1e-5 * (1.0 + scaled.abs()), "row {row}: {g} vs {scaled}");
            }
        }
        // 200 rows at p = 0.4: 80 expected, far from none and from all
        assert!((40..=120).contains(&dropped), "{dropped} of 200 rows dropped");
        // outside autodiff (evaluation) the encoder is the identity on its rows
        let inner = dropping.valid();
        let evaluated: Vec<f32> = inner.forward(NodeInput::Features(features.inner())).into_data().iter::<f32>().collect();
        assert_eq!(evaluated, want);
    }
}

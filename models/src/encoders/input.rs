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

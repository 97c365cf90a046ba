//! [`L2Penalty`]: the coupled L2 penalties of the weights that a single-device step adds to
//! its loss.

use burn::tensor::{Tensor, backend::Backend};
use megagraph_models::GraphTransformer;

use crate::config::OptimizerConfig;

/// The coupled L2 penalties `λ/2 ‖W‖²` a step adds to its loss (`[optimizer] input_l2`,
/// `layer_l2`, `classifier_l2`), each `λ` for one part of the model; 0 turns a part's off.
///
/// Unlike AdamW's decoupled weight decay, the penalty's gradient passes through Adam's
/// normalization, as in GCN's, APPNP's and GRAND's Adam (`weight_decay` there).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct L2Penalty {
    /// `λ` of the input projection ([`InputEncoder::weight_squared_norm`](megagraph_models::encoders::InputEncoder::weight_squared_norm)).
    pub input: f64,
    /// `λ` of the layers' weight matrices ([`GraphTransformer::layer_weight_squared_norm`]).
    pub layers: f64,
    /// `λ` of the classifier's weight matrix ([`GraphTransformer::classifier_weight_squared_norm`]).
    pub classifier: f64,
}

impl L2Penalty {
    /// The penalties an optimizer section asks for.
    pub fn from_config(optimizer: &OptimizerConfig) -> Self {
        Self {
            input: optimizer.input_l2,
            layers: optimizer.layer_l2,
            classifier: optimizer.classifier_l2,
        }
    }

    /// `loss` plus every penalty that is on (`loss` itself, with no extra graph, when none is).
    pub fn add_to<B: Backend>(&self, loss: Tensor<B, 1>, model: &GraphTransformer<B>) -> Tensor<B, 1> {
        let mut loss = loss;
        if self.input > 0.0 {
            loss = loss + model.input.weight_squared_norm() * (self.input / 2.0);
        }
        if self.layers > 0.0 {
            loss = loss + model.layer_weight_squared_norm() * (self.layers / 2.0);
        }
        if self.classifier > 0.0 {
            loss = loss + model.classifier_weight_squared_norm() * (self.classifier / 2.0);
        }
        loss
    }
}

//! [`Attend`]: the attention core a [`GraphAttention`](crate::GraphAttention) layer calls, so
//! that one layer runs on one device or on a parallel mesh without a copy of its code.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};
use megagraph_kernels::{
    AttentionBias, AttentionError, AttentionOptions, DistanceBias, GraphAttentionBackend, graph_attention,
};

/// What an attention core attends with: this device's queries, keys and values, their bias over
/// every key column of the sequence, and the op's options.
#[derive(Clone, Debug)]
pub struct AttendInputs<B: Backend> {
    /// Queries of this device, `[batch, heads, rows, head_dim]`.
    pub q: Tensor<B, 4>,
    /// Keys of this device, `[batch, heads, rows, head_dim]`.
    pub k: Tensor<B, 4>,
    /// Values of this device, `[batch, heads, rows, head_dim]`.
    pub v: Tensor<B, 4>,
    /// The bias and key mask of this device's query rows over every key column.
    pub bias: AttentionBias<B>,
    /// Scale and key tile of the op.
    pub options: AttentionOptions,
}

/// The spatial bias `distance` with the key mask `keys` (`[batch, keys]`, `true` = not
/// attended): the bias of a Graph Transformer layer.
pub fn spatial_bias<B: Backend>(distance: DistanceBias<B>, keys: Tensor<B, 2, Bool>) -> AttentionBias<B> {
    AttentionBias {
        distance: Some(distance),
        dense: None,
        key_padding_mask: Some(keys),
    }
}

/// The attention core of a layer: `softmax(q·kᵀ·scale + bias) · v` for this device's queries
/// over every key of the sequence, wherever those keys are.
///
/// [`LocalAttention`] is the biased op on one device, with every key at hand. A parallel
/// runtime implements it to reach keys on other devices (context parallelism's ring), and the
/// layer around it stays the model's own.
pub trait Attend<B: Backend> {
    /// Why a call can fail (shapes that disagree; on a mesh, a peer that is gone).
    type Error;

    /// Attention of this device's queries, `[batch, heads, rows, head_dim]`. `layer` is the
    /// global index of the calling layer (a parallel core keys its messages by it).
    fn attend(&self, inputs: AttendInputs<B>, layer: usize) -> Result<Tensor<B, 4>, Self::Error>;
}

/// The exact blockwise biased op ([`graph_attention`]) over keys that are all on this device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalAttention;

impl<B: GraphAttentionBackend> Attend<B> for LocalAttention {
    type Error = AttentionError;

    fn attend(&self, inputs: AttendInputs<B>, _layer: usize) -> Result<Tensor<B, 4>, AttentionError> {
        let AttendInputs { q, k, v, bias, options } = inputs;
        graph_attention(q, k, v, bias, &options).map(|attended| attended.output)
    }
}

/// The key mask of one layer: the padding, plus keys hidden by key dropout with probability
/// `key_dropout` while training (drawn afresh per call, so per layer). On a parallel mesh each
/// rank draws the mask of its own keys, which travel with them.
///
/// - `padding`: `[batch, keys]`, `true` for padding; output: the same shape
pub fn key_mask<B: Backend>(padding: &Tensor<B, 2, Bool>, key_dropout: f64) -> Tensor<B, 2, Bool> {
    let device = padding.device();
    if key_dropout <= 0.0 || !B::ad_enabled(&device) {
        return padding.clone();
    }
    // a Philox mask (see crate::dropout) keyed by a seed from the backend's generator
    let stream = crate::dropout::PhiloxStream::new(crate::dropout::draw_seed::<B>(&device), 0);
    let hidden = crate::dropout::dropout_mask_tensor::<B, 2>(padding.shape(), key_dropout, stream, &device);
    padding.clone().bool_or(hidden)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use burn::backend::Flex;
    use burn::tensor::{Distribution, Int, TensorData};

    use super::*;
    use crate::GraphTransformerLayerConfig;

    /// The local op, recording the layer index of every call.
    #[derive(Default)]
    struct Recording(RefCell<Vec<usize>>);

    impl Attend<Flex> for Recording {
        type Error = AttentionError;

        fn attend(&self, inputs: AttendInputs<Flex>, layer: usize) -> Result<Tensor<Flex, 4>, AttentionError> {
            self.0.borrow_mut().push(layer);
            LocalAttention.attend(inputs, layer)
        }
    }

    #[test]
    fn a_layer_runs_its_attention_through_the_core_it_is_given() {
        let device = Default::default();
        let layer = GraphTransformerLayerConfig::new(8, 2, 16).with_dropout(0.0).init::<Flex>(&device);
        let x = Tensor::<Flex, 3>::random([1, 5, 8], Distribution::Normal(0.0, 1.0), &device);
        let buckets: Vec<i64> = (0..25).map(|i| i % 4).collect();
        let bias = DistanceBias {
            index: Tensor::<Flex, 3, Int>::from_data(TensorData::new(buckets, [1, 5, 5]), &device).into(),
            table: Tensor::<Flex, 2>::random([4, 2], Distribution::Normal(0.0, 1.0), &device),
            column_offset: 0,
        };
        let padding = Tensor::<Flex, 2, Bool>::from_data(TensorData::new(vec![false, false, false, false, true], [1, 5]), &device);
        let local = layer.forward(x.clone(), bias.clone(), padding.clone());
        let recording = Recording::default();
        let through = layer.forward_with(x, spatial_bias(bias, padding), &recording, 7).expect("consistent shapes");
        assert_eq!(*recording.0.borrow(), vec![7]);
        local.into_data().assert_eq(&through.into_data(), true);
    }
}

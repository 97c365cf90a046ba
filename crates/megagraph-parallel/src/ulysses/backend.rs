//! [`UlyssesBackend`]: the all-to-all of Ulysses as a custom autodiff node, whose backward is
//! the same exchange reversed.

use core::marker::PhantomData;
use std::sync::Arc;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};

use super::endpoint::UlyssesEndpoint;
use super::message::{Exchanged, Phase, UlyssesTag};
use crate::{ParallelError, RingCall};

/// An autodiff backend that runs Ulysses' all-to-all with its own backward node. Implemented
/// for every [`Autodiff`] backend.
pub trait UlyssesBackend: AutodiffBackend {
    /// The all-to-all of `x` (`[batch, heads, rows, head_dim]`): its dimension `split` is cut
    /// into one part per position (part `j` goes to position `j`), and the parts received are
    /// concatenated along `concat` in position order. Differentiable: the gradient takes the
    /// reversed exchange (`concat` cut, `split` concatenated). `call` and `tensor` tag the
    /// messages; every position makes the same exchanges in the same order.
    ///
    /// # Errors
    ///
    /// A communication failure with a peer.
    fn ulysses_all_to_all(
        x: FloatTensor<Self>,
        split: usize,
        concat: usize,
        endpoint: &Arc<UlyssesEndpoint<Self::InnerBackend>>,
        call: RingCall,
        tensor: Exchanged,
    ) -> Result<FloatTensor<Self>, ParallelError>;
}

fn float<B: Backend>(primitive: FloatTensor<B>) -> Tensor<B, 4> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

/// The all-to-all on the inner backend.
pub(super) fn exchange<B: Backend>(
    x: FloatTensor<B>,
    split: usize,
    concat: usize,
    endpoint: &UlyssesEndpoint<B>,
    tag: UlyssesTag,
) -> Result<FloatTensor<B>, ParallelError> {
    let x = float::<B>(x);
    let part = x.dims()[split] / endpoint.size;
    let parts = (0..endpoint.size)
        .map(|j| {
            x.clone()
                .narrow(split, j * part, part)
                .into_primitive()
                .tensor()
        })
        .collect();
    let received: Vec<Tensor<B, 4>> = endpoint
        .all_to_all(tag, parts)?
        .into_iter()
        .map(float)
        .collect();
    Ok(Tensor::cat(received, concat).into_primitive().tensor())
}

/// Backward step of the all-to-all. Parent: `[x]`.
#[derive(Debug)]
struct AllToAllBackward<B> {
    _backend: PhantomData<B>,
}

/// What the backward step keeps: the exchange and the group.
#[derive(Clone, Debug)]
struct AllToAllState<B: Backend> {
    split: usize,
    concat: usize,
    endpoint: Arc<UlyssesEndpoint<B>>,
    tag: UlyssesTag,
    /// Shape of the input, for zero gradients after a failure.
    input_shape: [usize; 4],
}

impl<B: Backend> Backward<B, 1> for AllToAllBackward<B> {
    type State = AllToAllState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let [parent] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let AllToAllState {
            split,
            concat,
            endpoint,
            tag,
            input_shape,
        } = ops.state;
        let device = B::float_device(&grad);
        let dtype = grad.dtype();
        let reversed = UlyssesTag {
            phase: Phase::Backward,
            ..tag
        };
        let grad = match exchange(grad, concat, split, &endpoint, reversed) {
            Ok(grad) => grad,
            Err(error) => {
                endpoint.record_failure(error);
                Tensor::<B, 4>::zeros(input_shape, &device)
                    .cast(dtype)
                    .into_primitive()
                    .tensor()
            }
        };
        if let Some(node) = parent {
            grads.register::<B>(node.id, grad);
        }
    }
}

impl<B: Backend, C: CheckpointStrategy> UlyssesBackend for Autodiff<B, C> {
    fn ulysses_all_to_all(
        x: FloatTensor<Self>,
        split: usize,
        concat: usize,
        endpoint: &Arc<UlyssesEndpoint<B>>,
        call: RingCall,
        tensor: Exchanged,
    ) -> Result<FloatTensor<Self>, ParallelError> {
        let tag = UlyssesTag {
            call,
            tensor,
            phase: Phase::Forward,
        };
        let input_shape = float::<B>(x.primitive.clone()).dims();
        let node = x.node_guard();
        // communicate before registering the node, so an error leaves no half-built graph
        let output = exchange(x.primitive, split, concat, endpoint, tag)?;
        let step = AllToAllBackward::<B> {
            _backend: PhantomData,
        };
        Ok(match step.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(
                AllToAllState {
                    split,
                    concat,
                    endpoint: endpoint.clone(),
                    tag,
                    input_shape,
                },
                output,
            ),
            OpsKind::UnTracked(prep) => prep.finish(output),
        })
    }
}

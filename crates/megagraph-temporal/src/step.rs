//! [`train_batch`]: one training step of the single-worker loop, shared by the trainer and the
//! planner's profile.

use std::ops::Range;

use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;

use crate::batches::Phase;
use crate::error::Result;
use crate::forward::{forward_chunks, prepare_chunks};
use crate::setup::Setup;
use crate::state::NodeState;
use crate::tensors::BatchTensors;

/// Trains batch `index` of `phase` (the events `events`, one negative each): the IMR forward
/// pass, the backward pass, one optimizer step, then the batch's deferred memory write to
/// `state`. Returns the model and the batch's loss (`None` for a batch without a loss, which
/// leaves the model as it was).
#[allow(clippy::too_many_arguments)]
pub(crate) fn train_batch<B: AutodiffBackend, O: Optimizer<TemporalModel<B>, B>>(
    setup: &Setup<'_>,
    model: TemporalModel<B>,
    optimizer: &mut O,
    mut state: Option<&mut NodeState<B>>,
    phase: Phase,
    index: usize,
    events: Range<usize>,
    tensors: &BatchTensors<'_, B>,
) -> Result<(TemporalModel<B>, Option<f64>)> {
    let negatives = setup
        .negatives
        .sample(phase.negative_key(), index as u64, events.len(), 1);
    let events: Vec<usize> = events.collect();
    let chunks = prepare_chunks(setup, &events, &negatives, phase, index)?;
    let dropout = phase.dropout_scope(setup.config.seed, index);
    let forward = forward_chunks(setup, &model, state.as_deref_mut(), &chunks, tensors)?;
    drop(dropout);
    let Some(loss) = forward.loss else {
        return Ok((model, None));
    };
    let value: f64 = loss.clone().into_scalar().elem();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let model = optimizer.step(setup.config.learning_rate, model, grads);
    if let (Some((write, (src, dst))), Some(state)) = (forward.write, state) {
        write.apply(&src, &dst, &mut state.memory, &mut state.mailbox)?;
    }
    Ok((model, Some(value)))
}

//! The forward pass of one training batch, as IMR(c) chunks, and the loss it trains on.

use burn::tensor::activation::log_sigmoid;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use megagraph_models::temporal::{MemoryWrite, TemporalModel};

use crate::batches::Phase;
use crate::error::Result;
use crate::setup::Setup;
use crate::state::NodeState;
use crate::tensors::BatchTensors;

/// A training batch's forward pass: its loss and the deferred write of its last chunk, with
/// the endpoints of that chunk's events.
pub(crate) struct BatchForward<B: AutodiffBackend> {
    /// The batch's loss (`None` for a batch without events).
    pub loss: Option<Tensor<B, 1>>,
    /// The memory write and the sources and destinations it belongs to.
    pub write: Option<(MemoryWrite<B>, (Vec<usize>, Vec<usize>))>,
}

/// The forward pass of one training batch `events` (in time order) with one negative each
/// (`negatives`), as IMR(`refine`) chunks: every chunk but the last writes its nodes'
/// memory and mails to `state` before the next reads them. Returns the batch's loss (the
/// chunks' BCE weighted by their events) and the last chunk's deferred memory write with
/// its endpoints, to apply after the optimizer step. `index` is the batch's sampling key.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_batch<B: AutodiffBackend>(
    setup: &Setup<'_>,
    model: &TemporalModel<B>,
    mut state: Option<&mut NodeState<B>>,
    events: &[usize],
    negatives: &[u32],
    phase: Phase,
    index: usize,
    tensors: &BatchTensors<'_, B>,
) -> Result<BatchForward<B>> {
    let refine = setup.config.refine;
    let chunk_size = setup.config.batch_size.div_ceil(refine);
    let chunks = events.len().div_ceil(chunk_size.max(1));
    let mut loss: Option<Tensor<B, 1>> = None;
    let mut last_write = None;
    for (c, chunk) in events.chunks(chunk_size.max(1)).enumerate() {
        let offset = c * chunk_size;
        let prepared = setup.neighbourhood.prepare_events(
            &setup.data.stream,
            chunk.to_vec(),
            &negatives[offset..offset + chunk.len()],
            1,
            phase.sampler_key(index * refine + c),
        )?;
        let input = tensors.batch(&prepared, model, state.as_deref())?;
        let output = model.forward(input);
        let write = match (output.memory, state.is_some()) {
            (Some(memory), true) => {
                let (time, edge_feat) = tensors.events(&prepared);
                Some((model.memory_update(memory.detach(), time, edge_feat), setup.endpoints(&prepared)))
            }
            _ => None,
        };
        // The batch's mean: each chunk's BCE weighted by its share of the events.
        let chunk_loss = bce(output.positive, output.negative);
        let chunk_loss = if chunks == 1 {
            chunk_loss
        } else {
            chunk_loss.mul_scalar(chunk.len() as f64 / events.len() as f64)
        };
        loss = Some(match loss {
            Some(sum) => sum + chunk_loss,
            None => chunk_loss,
        });
        // IMR: an earlier chunk's nodes are written before the next chunk reads them;
        // the last chunk's write waits for the optimizer step, as TGL's does.
        if c + 1 < chunks {
            if let (Some((write, (src, dst))), Some(state)) = (write, state.as_deref_mut()) {
                write.apply(&src, &dst, &mut state.memory, &mut state.mailbox)?;
            }
        } else {
            last_write = write;
        }
    }
    Ok(BatchForward { loss, write: last_write })
}

/// Binary cross-entropy with logits: positives labelled 1, negatives 0, each averaged (TGL).
fn bce<B: Backend>(positive: Tensor<B, 1>, negative: Tensor<B, 2>) -> Tensor<B, 1> {
    -(log_sigmoid(positive).mean() + log_sigmoid(-negative).mean())
}

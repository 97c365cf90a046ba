//! The forward pass of one training batch, as IMR(c) chunks, and the loss it trains on.
//!
//! With intra-batch memory refinement ([`TemporalTrainConfig::refine`](crate::TemporalTrainConfig::refine)
//! = c > 1, DepBloom's IMR(c)) a training batch runs as chronological chunks of
//! `ceil(batch_size / c)` events: each chunk's memory and mails are written before the next
//! chunk reads them, the chunks' losses (weighted by their events) sum to the batch's, and one
//! optimizer step follows. Chunk boundaries then bound memory staleness as small batches
//! would, at one step per large batch.

use burn::tensor::activation::log_sigmoid;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use megagraph_models::temporal::{MemoryWrite, TemporalModel};

use crate::batches::Phase;
use crate::error::Result;
use crate::prepare::PreparedBatch;
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

/// The IMR(`refine`) chunks of one training batch `events` (in time order) with one negative
/// each (`negatives`), sampled: the batches of [`forward_chunks`]. `index` is the batch's
/// sampling key. Sampling reads no state, so a batch can be prepared ahead of time.
pub(crate) fn prepare_chunks(
    setup: &Setup<'_>,
    events: &[usize],
    negatives: &[u32],
    phase: Phase,
    index: usize,
) -> Result<Vec<PreparedBatch>> {
    let refine = setup.config.refine;
    let chunk_size = setup.config.batch_size.div_ceil(refine).max(1);
    events
        .chunks(chunk_size)
        .enumerate()
        .map(|(c, chunk)| {
            let offset = c * chunk_size;
            setup.neighbourhood.prepare_events(
                &setup.data.stream,
                chunk.to_vec(),
                &negatives[offset..offset + chunk.len()],
                1,
                phase.sampler_key(index * refine + c),
            )
        })
        .collect()
}

/// The forward pass of one training batch, prepared as IMR chunks by [`prepare_chunks`]:
/// every chunk but the last writes its nodes' memory and mails to `state` before the next
/// reads them. Returns the batch's loss (the chunks' BCE weighted by their events) and the
/// last chunk's deferred memory write with its endpoints, to apply after the optimizer step.
pub(crate) fn forward_chunks<B: AutodiffBackend>(
    setup: &Setup<'_>,
    model: &TemporalModel<B>,
    mut state: Option<&mut NodeState<B>>,
    chunks: &[PreparedBatch],
    tensors: &BatchTensors<'_, B>,
) -> Result<BatchForward<B>> {
    let events: usize = chunks.iter().map(PreparedBatch::num_events).sum();
    let mut loss: Option<Tensor<B, 1>> = None;
    let mut last_write = None;
    for (c, prepared) in chunks.iter().enumerate() {
        let input = tensors.batch(prepared, model, state.as_deref())?;
        let output = model.forward(input);
        let write = match (output.memory, state.is_some()) {
            (Some(memory), true) => {
                let (time, edge_feat) = tensors.events(prepared);
                Some((model.memory_update(memory.detach(), time, edge_feat), setup.endpoints(prepared)))
            }
            _ => None,
        };
        // The batch's mean: each chunk's BCE weighted by its share of the events.
        let chunk_loss = bce(output.positive, output.negative);
        let chunk_loss = if chunks.len() == 1 {
            chunk_loss
        } else {
            chunk_loss.mul_scalar(prepared.num_events() as f64 / events as f64)
        };
        loss = Some(match loss {
            Some(sum) => sum + chunk_loss,
            None => chunk_loss,
        });
        // IMR: an earlier chunk's nodes are written before the next chunk reads them;
        // the last chunk's write waits for the optimizer step, as TGL's does.
        if c + 1 < chunks.len() {
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

//! Scoring a validation or test split, writing memory as training does.

use burn::tensor::backend::Backend;
use megagraph_models::temporal::TemporalModel;

use crate::batches::{Phase, batches};
use crate::error::Result;
use crate::metrics::{LinkScores, mean_reciprocal_rank};
use crate::observer::TemporalObserver;
use crate::setup::Setup;
use crate::state::NodeState;

/// Scores of one evaluated split.
pub(crate) struct Evaluation {
    /// Positive and first-negative scores, for AP and AUC.
    pub scores: LinkScores,
    /// MRR against every negative (`None` without any scored event).
    pub mrr: Option<f64>,
}

/// Scores the events of `phase`'s split with `negatives` negatives each (the first one for
/// AP and AUC, all of them for MRR), writing memory as training does.
pub(crate) fn evaluate<B: Backend>(
    setup: &Setup<'_>,
    model: &TemporalModel<B>,
    mut state: Option<&mut NodeState<B>>,
    phase: Phase,
    negatives: usize,
    device: &B::Device,
    observer: &mut dyn TemporalObserver,
) -> Result<Evaluation> {
    let (config, split) = (setup.config, &setup.data.split);
    let (range, name) = match phase {
        Phase::Test => (split.test.clone(), "test"),
        _ => (split.valid.clone(), "valid"),
    };
    let batches = batches(range, config.eval_batch_size.unwrap_or(config.batch_size));
    observer.evaluation_started(name, batches.len());
    let tensors = setup.tensors::<B>(device);
    let (mut scores, mut reciprocal_sum, mut scored) = (LinkScores::default(), 0.0, 0usize);
    for (index, events) in batches.iter().enumerate() {
        let prepared = setup.prepare(phase, index, events.clone(), negatives)?;
        let input = tensors.batch(&prepared, model, state.as_deref())?;
        let output = model.forward(input);
        let positive: Vec<f32> = output.positive.into_data().iter::<f32>().collect();
        let negative: Vec<f32> = output.negative.into_data().iter::<f32>().collect();
        let first: Vec<f32> = negative.chunks(negatives).map(|row| row[0]).collect();
        scores.push_batch(&positive, &first);
        if let Some(mrr) = mean_reciprocal_rank(&positive, &negative, negatives) {
            reciprocal_sum += mrr * positive.len() as f64;
            scored += positive.len();
        }
        if let (Some(memory), Some(state)) = (output.memory, state.as_deref_mut()) {
            let (time, edge_feat) = tensors.events(&prepared);
            let (src, dst) = setup.endpoints(&prepared);
            model
                .memory_update(memory, time, edge_feat)
                .apply(&src, &dst, &mut state.memory, &mut state.mailbox)?;
        }
        observer.evaluation_batch_finished();
    }
    Ok(Evaluation {
        scores,
        mrr: (scored > 0).then(|| reciprocal_sum / scored as f64),
    })
}

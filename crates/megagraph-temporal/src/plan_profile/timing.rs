//! What the planner's profile times on the real backend: training steps of one batch size and
//! refinement count, and the window-boundary synchronization of node rows.

use std::ops::Range;
use std::time::Instant;

use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig};
use burn::tensor::backend::AutodiffBackend;
use megagraph_models::temporal::TemporalModel;

use crate::batches::{Phase, batches};
use crate::config::TemporalTrainConfig;
use crate::dataset::TemporalDataset;
use crate::error::Result;
use crate::setup::Setup;
use crate::state::NodeState;
use crate::step::train_batch;
use crate::workers::store::NodeRows;

/// Timed and warm-up repetitions of one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Repetitions {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs after them.
    pub timed: usize,
}

/// One configuration being timed: its setup, model, optimizer, state and full batches.
struct TimedRun<'a, B: AutodiffBackend> {
    setup: Setup<'a>,
    model: Option<TemporalModel<B>>,
    optimizer: OptimizerAdaptor<Adam, TemporalModel<B>, B>,
    state: Option<NodeState<B>>,
    batches: Vec<Range<usize>>,
    seconds: Vec<f64>,
}

/// For each of `configs`, the median seconds of one training step (forward with its
/// `refine` chunks, backward, Adam step, memory write) on full batches of its `batch_size`
/// training events from the start of the training split, the warm-up steps excluded. The
/// configurations take turns step by step, so a drift of the machine's speed moves them
/// alike. The warm-up shrinks first when a split holds fewer full batches than
/// `repetitions` asks for; one step is always timed.
pub(crate) fn seconds_per_batch<B: AutodiffBackend>(
    configs: &[TemporalTrainConfig],
    data: &TemporalDataset,
    repetitions: Repetitions,
    device: &B::Device,
) -> Result<Vec<f64>> {
    let mut runs = Vec::with_capacity(configs.len());
    for config in configs {
        let setup = Setup::new(config, data)?;
        B::seed(device, config.seed);
        let model: TemporalModel<B> = setup.model.init(device);
        let state = NodeState::<B>::for_model(&setup.model, data.stream.num_nodes(), device);
        let batches = batches(data.split.train.clone(), config.batch_size)
            .into_iter()
            .filter(|b| b.len() == config.batch_size)
            .collect();
        runs.push(TimedRun {
            setup,
            model: Some(model),
            optimizer: AdamConfig::new().init::<B, TemporalModel<B>>(),
            state,
            batches,
            seconds: Vec::new(),
        });
    }
    let available = runs.iter().map(|r| r.batches.len()).min().unwrap_or(0);
    let timed = repetitions.timed.clamp(1, available.max(1));
    let warmup = repetitions.warmup.min(available.saturating_sub(timed));
    for index in 0..(warmup + timed).min(available) {
        for run in &mut runs {
            let Some(model) = run.model.take() else { continue };
            let tensors = run.setup.tensors::<B>(device);
            let (events, state) = (run.batches[index].clone(), run.state.as_mut());
            let started = Instant::now();
            let phase = Phase::Train(1);
            let (trained, _) = train_batch(
                &run.setup,
                model,
                &mut run.optimizer,
                state,
                phase,
                index,
                events,
                &tensors,
            )?;
            if index >= warmup {
                run.seconds.push(started.elapsed().as_secs_f64());
            }
            run.model = Some(trained);
        }
    }
    Ok(runs.iter_mut().map(|run| median(&mut run.seconds)).collect())
}

/// The median seconds per node of a window-boundary exchange: reading the rows (memory,
/// update time, mails) of `nodes` nodes out of one worker's state and writing them into
/// another's, as the workers' memory store does. 0 for a memoryless model.
pub(crate) fn sync_seconds_per_node<B: AutodiffBackend>(
    config: &TemporalTrainConfig,
    data: &TemporalDataset,
    nodes: usize,
    repetitions: Repetitions,
    device: &B::Device,
) -> Result<f64> {
    let num_nodes = data.stream.num_nodes();
    let model = config.model_config(num_nodes, data.stream.edge_feature_dim());
    let (Some(source), Some(mut target)) = (
        NodeState::<B>::for_model(&model, num_nodes, device),
        NodeState::<B>::for_model(&model, num_nodes, device),
    ) else {
        return Ok(0.0);
    };
    let nodes = nodes.clamp(1, num_nodes.max(1));
    // every `stride`-th node, as a window's touched nodes spread over the ids
    let stride = (num_nodes / nodes).max(1);
    let written: Vec<(usize, usize)> = (0..nodes).map(|i| (i * stride, i)).collect();
    let mut seconds = Vec::with_capacity(repetitions.timed);
    for run in 0..repetitions.warmup + repetitions.timed.max(1) {
        let started = Instant::now();
        NodeRows::read(&source, &written)?.write(&mut target, device)?;
        if run >= repetitions.warmup {
            seconds.push(started.elapsed().as_secs_f64() / nodes as f64);
        }
    }
    Ok(median(&mut seconds))
}

/// The median of `values` (sorted in place); 0 when empty.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => 0.5 * (values[n / 2 - 1] + values[n / 2]),
    }
}

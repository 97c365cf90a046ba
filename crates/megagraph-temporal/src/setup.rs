//! [`Setup`]: what a run needs besides the model's parameters: the configuration checked
//! against the data, the samplers, the negatives and the time origin.

use std::ops::Range;
use std::time::Duration;

use burn::tensor::backend::Backend;
use megagraph_graph::temporal::{
    EventDirection, NegativeSampler, ShardStrategy, TemporalCsr, TemporalSampler, WindowShards,
};
use megagraph_models::temporal::{EmbeddingKind, TemporalModelConfig};

use crate::batches::Phase;
use crate::config::TemporalTrainConfig;
use crate::dataset::TemporalDataset;
use crate::error::{Result, TemporalTrainError};
use crate::prepare::{Neighbourhood, PreparedBatch};
use crate::scheme::TemporalScheme;
use crate::tensors::BatchTensors;

/// A run's configuration and data with its samplers, shared by the single-worker loop, the
/// workers and the evaluation.
pub(crate) struct Setup<'a> {
    /// The run's configuration.
    pub(crate) config: &'a TemporalTrainConfig,
    /// The run's data.
    pub(crate) data: &'a TemporalDataset,
    /// The model's configuration for these data.
    pub(crate) model: TemporalModelConfig,
    /// Neighbour sampling.
    pub(crate) neighbourhood: Neighbourhood,
    /// Negative destinations.
    pub(crate) negatives: NegativeSampler,
    /// The time of the stream's first event.
    pub(crate) time_origin: f64,
    /// DepBloom's windows of the stream, sharded over the workers by topology.
    pub(crate) shards: Option<WindowShards>,
    /// How long the background memory write-back waits before each write: zero, but for tests
    /// that check a deferred write completes before its node's next read however slow it is.
    pub(crate) write_back_delay: Duration,
}

impl<'a> Setup<'a> {
    /// Checks `config` against `data` and builds the samplers.
    ///
    /// # Errors
    ///
    /// An invalid configuration, a split with an empty part, or data the samplers reject.
    pub(crate) fn new(config: &'a TemporalTrainConfig, data: &'a TemporalDataset) -> Result<Self> {
        config.validate()?;
        let (stream, split) = (&data.stream, &data.split);
        if split.train.is_empty() || split.valid.is_empty() || split.test.is_empty() {
            return Err(TemporalTrainError::InvalidConfig {
                field: "split",
                reason: format!(
                    "leaves a part empty (train {}, valid {}, test {} events)",
                    split.train.len(),
                    split.valid.len(),
                    split.test.len()
                ),
            });
        }
        let model = config.model_config(stream.num_nodes(), stream.edge_feature_dim());
        let sampler = config.sampler();
        let neighbourhood = match model.embedding {
            EmbeddingKind::Attention => Neighbourhood::Hops(TemporalSampler::new(
                TemporalCsr::new(stream, EventDirection::Undirected),
                sampler,
            )?),
            EmbeddingKind::Dysat => {
                let times = stream.time();
                let train_span = times[split.train.end - 1] - times[split.train.start];
                let span = config
                    .snapshot_span
                    .unwrap_or(if train_span > 0.0 { train_span / 100.0 } else { 1.0 });
                Neighbourhood::Snapshots {
                    csr: TemporalCsr::new(stream, EventDirection::Undirected),
                    count: model.snapshots,
                    span,
                    fanout: sampler.fanouts[0],
                }
            }
            EmbeddingKind::Identity | EmbeddingKind::Jodie => Neighbourhood::Roots,
        };
        Ok(Self {
            config,
            data,
            model,
            neighbourhood,
            negatives: NegativeSampler::new(stream, config.seed)?,
            time_origin: stream.time().first().copied().unwrap_or(0.0),
            shards: match config.scheme {
                Some(TemporalScheme::Depbloom) => Some(WindowShards::build(
                    stream,
                    config.workers,
                    config.window_events(),
                    ShardStrategy::Topology,
                    config.seed,
                )?),
                _ => None,
            },
            write_back_delay: Duration::ZERO,
        })
    }

    /// The tensors of batches on `device`.
    pub(crate) fn tensors<'s, B: Backend>(&'s self, device: &'s B::Device) -> BatchTensors<'s, B> {
        BatchTensors {
            stream: &self.data.stream,
            time_origin: self.time_origin,
            device,
        }
    }

    /// Batch `index` of `phase`: the events `events` with `negatives` negatives each, sampled.
    pub(crate) fn prepare(
        &self,
        phase: Phase,
        index: usize,
        events: Range<usize>,
        negatives: usize,
    ) -> Result<PreparedBatch> {
        let drawn = self
            .negatives
            .sample(phase.negative_key(), index as u64, events.len(), negatives);
        self.neighbourhood
            .prepare(&self.data.stream, events, &drawn, negatives, phase.sampler_key(index))
    }

    /// The sources and destinations of a prepared batch's events, as memory row ids.
    pub(crate) fn endpoints(&self, batch: &PreparedBatch) -> (Vec<usize>, Vec<usize>) {
        let stream = &self.data.stream;
        let ids = |column: &[u32]| batch.events.iter().map(|&e| column[e] as usize).collect();
        (ids(stream.src()), ids(stream.dst()))
    }
}

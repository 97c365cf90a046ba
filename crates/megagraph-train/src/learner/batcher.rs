//! [`SequenceBatcher`]: Burn's batcher for sequences of a [`SequenceDataset`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;

use super::SequenceBatch;
use crate::data::{SequenceDataset, SplitRole};

/// Turns sequence indices (from [`SplitSequences`](super::SplitSequences)) into a
/// [`SequenceBatch`] scoring the nodes of one split. Use it with Burn's `DataLoaderBuilder`:
///
/// ```no_run
/// # use std::sync::Arc;
/// # use burn::backend::{Autodiff, Flex};
/// # use burn::data::dataloader::DataLoaderBuilder;
/// # use megagraph_train::{SequenceBatch, SequenceBatcher, SplitRole, SplitSequences, TrainConfig, prepare};
/// let data = Arc::new(prepare(&TrainConfig::default())?);
/// let train = DataLoaderBuilder::<Autodiff<Flex>, usize, SequenceBatch<Autodiff<Flex>>>::new(
///     SequenceBatcher::new(data.clone(), SplitRole::Train),
/// )
/// .batch_size(4)
/// .shuffle(0)
/// .build(SplitSequences::new(data, SplitRole::Train));
/// # Ok::<(), megagraph_train::TrainError>(())
/// ```
#[derive(Clone)]
pub struct SequenceBatcher {
    data: Arc<SequenceDataset>,
    role: SplitRole,
    structure_dropout: Option<(f64, u64)>,
    batches: Arc<AtomicU64>,
}

impl SequenceBatcher {
    /// A batcher for `data` scoring the labelled nodes of `role`.
    pub fn new(data: Arc<SequenceDataset>, role: SplitRole) -> Self {
        Self {
            data,
            role,
            structure_dropout: None,
            batches: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Applies structure dropout with probability `probability` to every batch (a training
    /// regularizer, see [`SequenceDataset::batch_with_structure_dropout`]); batch `k` uses the
    /// seed `seed + k`.
    pub fn with_structure_dropout(mut self, probability: f64, seed: u64) -> Self {
        self.structure_dropout = (probability > 0.0).then_some((probability, seed));
        self
    }

    /// The dataset.
    pub fn data(&self) -> &Arc<SequenceDataset> {
        &self.data
    }
}

impl<B: Backend> Batcher<B, usize, SequenceBatch<B>> for SequenceBatcher {
    fn batch(&self, items: Vec<usize>, device: &B::Device) -> SequenceBatch<B> {
        let structure_dropout = self.structure_dropout.map(|(probability, seed)| {
            let k = self.batches.fetch_add(1, Ordering::Relaxed);
            (probability, seed.wrapping_add(k))
        });
        SequenceBatch {
            structure_dropout,
            ..SequenceBatch::new(self.data.clone(), items, self.role, device.clone())
        }
    }
}

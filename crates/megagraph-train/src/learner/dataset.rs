//! [`SplitSequences`]: the sequences of one split as a Burn dataset.

use std::sync::Arc;

use burn::data::dataset::Dataset;

use crate::data::{SequenceDataset, SplitRole};

/// The sequences of a [`SequenceDataset`] that hold at least one labelled node of one split,
/// as a Burn [`Dataset`] of sequence indices (into [`SequenceDataset::sequences`]).
///
/// A training loader over `SplitSequences::new(data, SplitRole::Train)` never yields a batch
/// without training nodes, and a validation loader never one without validation nodes, so every
/// batch has a loss and an accuracy. Pair it with a [`SequenceBatcher`](super::SequenceBatcher)
/// of the same role.
#[derive(Clone)]
pub struct SplitSequences {
    data: Arc<SequenceDataset>,
    role: SplitRole,
    indices: Vec<usize>,
}

impl SplitSequences {
    /// The sequences of `data` holding at least one labelled node of `role`.
    pub fn new(data: Arc<SequenceDataset>, role: SplitRole) -> Self {
        let indices = (0..data.num_sequences())
            .filter(|&index| data.sequences[index].iter().any(|&node| data.is_scored(node, role)))
            .collect();
        Self { data, role, indices }
    }

    /// The split.
    pub fn role(&self) -> SplitRole {
        self.role
    }

    /// The sequence indices, in order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The number of labelled nodes of the split in these sequences.
    pub fn scored_nodes(&self) -> usize {
        self.indices
            .iter()
            .map(|&index| {
                let nodes = &self.data.sequences[index];
                nodes.iter().filter(|&&node| self.data.is_scored(node, self.role)).count()
            })
            .sum()
    }
}

impl Dataset<usize> for SplitSequences {
    fn get(&self, index: usize) -> Option<usize> {
        self.indices.get(index).copied()
    }

    fn len(&self) -> usize {
        self.indices.len()
    }
}

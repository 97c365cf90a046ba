//! [`SequenceBatch`]: a batch of sequences as a data loader yields it, and [`ScoredBatch`], its
//! tensors.

use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_models::{GraphBatch, SparseAttention};

use crate::data::{NodeBatch, SequenceDataset, SplitRole};
use crate::error::Result;
use crate::step_attention::StepAttention;

/// A batch of sequences of a [`SequenceDataset`], as a
/// [`SequenceBatcher`](super::SequenceBatcher) makes it: the sequence indices, the split whose
/// nodes are scored and the target device. The tensors are built by [`tensors`](Self::tensors)
/// when the batch is used, so a parallel plan can hand the indices to its ranks (each builds
/// only its own share) without building the whole batch on one device.
#[derive(Clone)]
pub struct SequenceBatch<B: Backend> {
    /// The dataset the indices point into.
    pub data: Arc<SequenceDataset>,
    /// Indices into [`SequenceDataset::sequences`].
    pub sequences: Vec<usize>,
    /// The split whose labelled nodes count in the loss and the metrics.
    pub role: SplitRole,
    /// Where the tensors go.
    pub device: B::Device,
    /// Structure dropout `(probability, seed)` (see
    /// [`SequenceDataset::batch_with_structure_dropout`]); `None` = none.
    pub structure_dropout: Option<(f64, u64)>,
    /// The attention core the model runs on the batch: full attention (the default), or sparse
    /// attention, for which no distance rows are built. [`MegaGraphTrainer`](super::MegaGraphTrainer)
    /// sets it per step from its [`with_attention`](super::MegaGraphTrainer::with_attention).
    pub attention: StepAttention,
}

impl<B: Backend> std::fmt::Debug for SequenceBatch<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceBatch")
            .field("dataset", &self.data.dataset.name)
            .field("sequences", &self.sequences)
            .field("role", &self.role)
            .field("device", &self.device)
            .field("structure_dropout", &self.structure_dropout)
            .field("attention", &self.attention)
            .finish()
    }
}

/// The tensors of a [`SequenceBatch`]: the model input and the scored nodes.
#[derive(Clone, Debug)]
pub struct ScoredBatch<B: Backend> {
    /// Model input, `[batch, seq, ...]`.
    pub graph: GraphBatch<B>,
    /// Class of each position, `[batch, seq]` (0 where not scored).
    pub labels: Tensor<B, 2, Int>,
    /// 1.0 at the scored positions, else 0.0, `[batch, seq]`.
    pub weight: Tensor<B, 2>,
    /// Flat positions (`b * seq + i`) of the scored nodes, `[scored]`.
    pub positions: Tensor<B, 1, Int>,
    /// Classes of the scored nodes, `[scored]`.
    pub targets: Tensor<B, 1, Int>,
    /// The number of scored nodes.
    pub scored: usize,
    /// Host copy of the node at each position (`None` = padding), row-major `[batch, seq]`.
    pub nodes: Vec<Option<u32>>,
    /// The sparse attention core over the batch's edges when the batch runs sparse attention
    /// ([`SequenceBatch::attention`]); `None`: full attention.
    pub sparse: Option<SparseAttention<B>>,
}

impl<B: Backend> SequenceBatch<B> {
    /// A batch of `sequences` of `data` scoring the labelled nodes of `role`, on `device`.
    pub fn new(data: Arc<SequenceDataset>, sequences: Vec<usize>, role: SplitRole, device: B::Device) -> Self {
        Self {
            data,
            sequences,
            role,
            device,
            structure_dropout: None,
            attention: StepAttention::Full,
        }
    }

    /// The number of labelled nodes of the batch's split in its sequences (host only).
    pub fn scored_nodes(&self) -> usize {
        self.sequences
            .iter()
            .flat_map(|&index| &self.data.sequences[index])
            .filter(|&&node| self.data.is_scored(node, self.role))
            .count()
    }

    /// Builds the tensors on the batch's device (with the sparse core's edges under sparse
    /// attention).
    ///
    /// # Panics
    ///
    /// If a sequence index is out of range (indices from [`SplitSequences`](super::SplitSequences)
    /// of the same dataset never are), or if the batch's sparse attention reforms edges but the
    /// dataset's sequences were not reordered into clusters (see
    /// [`try_tensors`](Self::try_tensors)).
    pub fn tensors(&self) -> ScoredBatch<B> {
        self.try_tensors().unwrap_or_else(|error| panic!("cannot build the batch's sparse attention: {error}"))
    }

    /// [`tensors`](Self::tensors), with the sparse core's error returned.
    ///
    /// # Errors
    ///
    /// As [`SequenceDataset::batch_edges`]: a reformation without the sequences' clusters.
    ///
    /// # Panics
    ///
    /// If a sequence index is out of range.
    pub fn try_tensors(&self) -> Result<ScoredBatch<B>> {
        let (data, device) = (&*self.data, &self.device);
        let sparse = self.attention.core::<B>(data, &self.sequences, device)?;
        let batch: NodeBatch<B> = self.attention.batch(data, &self.sequences, device, self.structure_dropout);
        let seq = self.data.seq_len;
        let mut positions = Vec::new();
        let mut targets = Vec::new();
        let weight: Vec<f32> = batch
            .nodes
            .iter()
            .enumerate()
            .map(|(position, node)| match node {
                Some(node) if self.data.is_scored(*node, self.role) => {
                    positions.push(position as i64);
                    targets.push(self.data.dataset.labels[*node as usize]);
                    1.0
                }
                _ => 0.0,
            })
            .collect();
        let scored = positions.len();
        let rows = self.sequences.len();
        Ok(ScoredBatch {
            graph: batch.graph,
            labels: batch.labels,
            weight: Tensor::from_data(TensorData::new(weight, [rows, seq]), &self.device),
            positions: Tensor::from_data(TensorData::new(positions, [scored]), &self.device),
            targets: Tensor::from_data(TensorData::new(targets, [scored]), &self.device),
            scored,
            nodes: batch.nodes,
            sparse,
        })
    }
}

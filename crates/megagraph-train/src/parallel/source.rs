//! [`DatasetSource`]: a [`SequenceDataset`] as the batch source of a parallel mesh.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::backend::Backend;
use megagraph_parallel::{BatchSource, BlockBatch, BlockRequest, TrainBatch, padded_len};

use crate::data::{NodeBatch, NodeBlock, SequenceDataset};

/// The training batches of a [`SequenceDataset`] for [`megagraph_parallel::ParallelTrainer`]:
/// every rank builds only the rows of its context block from the shared dataset (their distance
/// rows, and node inputs only on the embedding stage), with the values the single-device trainer
/// builds for those rows (same labels, weights and structural inputs).
///
/// Structure dropout, when `p > 0`, draws per sequence from the seed set with
/// [`set_step_seed`](Self::set_step_seed) before each step, so a sharded step drops the same
/// node pairs as the single-device step.
pub struct DatasetSource {
    data: Arc<SequenceDataset>,
    structure_dropout: f64,
    step_seed: AtomicU64,
}

impl DatasetSource {
    /// A source over `data` with structure dropout probability `structure_dropout` (0 = none).
    pub fn new(data: Arc<SequenceDataset>, structure_dropout: f64) -> Self {
        Self {
            data,
            structure_dropout,
            step_seed: AtomicU64::new(0),
        }
    }

    /// The dataset.
    pub fn data(&self) -> &SequenceDataset {
        &self.data
    }

    /// Structure dropout of the current step, if any: `(p, seed)`.
    fn dropout(&self) -> Option<(f64, u64)> {
        (self.structure_dropout > 0.0).then(|| (self.structure_dropout, self.step_seed.load(Ordering::SeqCst)))
    }

    /// Checks that every sequence index is in the dataset.
    fn check(&self, sequences: &[usize]) -> Result<(), String> {
        let count = self.data.num_sequences();
        match sequences.iter().find(|&&index| index >= count) {
            Some(bad) => Err(format!("sequence {bad} is out of range: the dataset has {count} sequences")),
            None => Ok(()),
        }
    }

    /// Sets the structure-dropout seed of the next step (call before
    /// [`ParallelTrainer::step`](megagraph_parallel::ParallelTrainer::step)).
    pub fn set_step_seed(&self, seed: u64) {
        self.step_seed.store(seed, Ordering::SeqCst);
    }
}

impl<B: Backend> BatchSource<B> for DatasetSource {
    fn batch(&self, sequences: &[usize], device: &B::Device) -> Result<TrainBatch<B>, String> {
        self.check(sequences)?;
        let NodeBatch {
            graph,
            labels,
            train_weight,
            ..
        } = self.data.batch_with_structure_dropout(sequences, device, self.dropout());
        Ok(TrainBatch {
            graph,
            labels,
            train_weight,
        })
    }

    fn block(&self, sequences: &[usize], request: BlockRequest, device: &B::Device) -> Result<BlockBatch<B>, String> {
        self.check(sequences)?;
        let seq_len = self.data.seq_len;
        let NodeBlock { block, .. } = self.data.block(
            sequences,
            request.rows(seq_len),
            padded_len(seq_len, request.cp),
            request.with_input,
            device,
            self.dropout(),
        );
        Ok(block)
    }

    fn train_nodes(&self, sequences: &[usize]) -> usize {
        let nodes = sequences.iter().filter_map(|&index| self.data.sequences.get(index)).flatten();
        self.data.loss_nodes(nodes.copied())
    }
}

//! [`StepAttention`]: the attention core one training step (or one evaluation batch) runs, and
//! the one code path that builds a batch for it and runs the model with it, shared by the
//! command line's single-device steps, its evaluation and
//! [`MegaGraphTrainer`](crate::MegaGraphTrainer)'s batches.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use megagraph_graph::sequence::BlockReform;
use megagraph_models::{GraphAttentionBackend, GraphBatch, GraphTransformer, LocalAttention, SparseAttention};

use crate::data::{NodeBatch, SequenceDataset};
use crate::error::Result;
use crate::input_propagation::InputPropagation;
use crate::prediction_propagation::PropagationEdges;

/// The attention core of a step: megagraph's full biased attention, or TorchGT's sparse edge
/// attention (the `[attention]` section decides which steps run which).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StepAttention {
    /// Full biased attention ([`LocalAttention`](megagraph_models::LocalAttention), or the ring
    /// on a mesh), which reads the spatial distance rows.
    #[default]
    Full,
    /// TorchGT's sparse edge attention over each sequence's edges, reformed into dense tiles by
    /// `reform` when given, with TorchGT's global token where the model's graph token sits when
    /// `graph_token`. It reads no distance rows, so none are built for it.
    Sparse {
        /// Elastic computation reformation of the edges.
        reform: Option<BlockReform>,
        /// Whether the model has Graphormer's graph token: the edges then join it (position 0)
        /// both ways to every node ([`SequenceDataset::batch_edges`]).
        graph_token: bool,
    },
}

impl StepAttention {
    /// Whether the step reads the spatial distance rows (full attention does, sparse does not).
    pub fn reads_distances(&self) -> bool {
        matches!(self, Self::Full)
    }

    /// The batch of the sequences `indices` on `device` for this core: with distance rows (and
    /// structure dropout `dropout`, see [`SequenceDataset::batch_with_structure_dropout`]) for
    /// full attention, without them ([`SequenceDataset::batch_without_distances`]) for sparse.
    pub(crate) fn batch<B: Backend>(
        &self,
        data: &SequenceDataset,
        indices: &[usize],
        device: &B::Device,
        dropout: Option<(f64, u64)>,
    ) -> NodeBatch<B> {
        match self {
            Self::Full => data.batch_with_structure_dropout(indices, device, dropout),
            Self::Sparse { .. } => data.batch_without_distances(indices, device),
        }
    }

    /// The core the model runs on the sequences `indices` of `data`: `None` for full attention,
    /// else sparse edge attention over their edges ([`SequenceDataset::batch_edges`], joined to
    /// the graph token with `graph_token`).
    ///
    /// # Errors
    ///
    /// As [`SequenceDataset::batch_edges`] (a reformation without the sequences' clusters).
    pub(crate) fn core<B: Backend>(
        &self,
        data: &SequenceDataset,
        indices: &[usize],
        device: &B::Device,
    ) -> Result<Option<SparseAttention<B>>> {
        match self {
            Self::Full => Ok(None),
            Self::Sparse { reform, graph_token } => {
                let edges = data.batch_edges::<B>(indices, reform.as_ref(), *graph_token, device)?;
                Ok(Some(SparseAttention::new(edges)))
            }
        }
    }
}

/// The per-node logits `[batch, seq, classes]` of `graph` with the attention `core` (from
/// [`StepAttention::core`]; full attention when `None`).
///
/// # Errors
///
/// The sparse core's when its edges do not fit the batch.
pub(crate) fn step_logits<B: GraphAttentionBackend>(
    model: &GraphTransformer<B>,
    graph: GraphBatch<B>,
    core: Option<&SparseAttention<B>>,
) -> Result<Tensor<B, 3>> {
    step_logits_mixed(model, graph, core, None)
}

/// [`step_logits`] with the encoded rows first propagated by `input` over its edges (among the
/// batch's positions), when given.
///
/// # Errors
///
/// As [`step_logits`].
pub(crate) fn step_logits_mixed<B: GraphAttentionBackend>(
    model: &GraphTransformer<B>,
    graph: GraphBatch<B>,
    core: Option<&SparseAttention<B>>,
    input: Option<(&InputPropagation, &PropagationEdges)>,
) -> Result<Tensor<B, 3>> {
    let mix = |rows: Tensor<B, 3>| match input {
        Some((propagation, edges)) => propagation.apply_to_batch(rows, edges),
        None => rows,
    };
    match core {
        None => Ok(model.forward_mixed_with(graph, &LocalAttention, mix)?),
        Some(core) => Ok(model.forward_mixed_with(graph, core, mix)?),
    }
}

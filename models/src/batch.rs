use burn::tensor::{Bool, Int, Tensor, backend::Backend};
use megagraph_kernels::BucketIndex;

use crate::encoders::EdgePaths;

/// What the input encoder reads for each node of a sequence.
#[derive(Clone, Debug)]
pub enum NodeInput<B: Backend> {
    /// Node features, shape `[batch, seq, feature_dim]`.
    Features(Tensor<B, 3>),
    /// Global node ids, shape `[batch, seq]`, for graphs without features (learned embeddings).
    Ids(Tensor<B, 2, Int>),
}

/// A batch of node sequences with the structural inputs a [`GraphTransformer`](crate::GraphTransformer)
/// needs. Sequences shorter than `seq` are padded; padded positions are marked in `padding`.
#[derive(Clone, Debug)]
pub struct GraphBatch<B: Backend> {
    /// Node features or node ids.
    pub input: NodeInput<B>,
    /// In-degree of each node in the graph, shape `[batch, seq]`.
    pub in_degree: Tensor<B, 2, Int>,
    /// Out-degree of each node in the graph, shape `[batch, seq]`.
    pub out_degree: Tensor<B, 2, Int>,
    /// Shortest-path distance bucket of every node pair over `[batch, seq, seq]` (values
    /// `0..=max_distance`, and `max_distance + 1` for "farther or unreachable"): a dense
    /// `Tensor<B, 3, Int>` (`.into()`) or sparse, with only the near pairs stored.
    pub distance: BucketIndex<B>,
    /// Padding mask, shape `[batch, seq]`; `true` marks a padded position.
    pub padding: Tensor<B, 2, Bool>,
    /// One shortest path per pair as edge features, for a model with an [edge
    /// encoding](crate::encoders::EdgeEncoding); `None` otherwise.
    pub edge_paths: Option<EdgePaths<B>>,
    /// The class shown as input at each position, `[batch, seq]`, for a model with a [label
    /// encoding](crate::encoders::LabelEncoding) (UniMP's label input); `num_classes` where no
    /// label is shown. `None`: no label is shown anywhere.
    pub label_input: Option<Tensor<B, 2, Int>>,
}

impl<B: Backend> GraphBatch<B> {
    /// Number of sequences in the batch.
    pub fn batch_size(&self) -> usize {
        self.padding.dims()[0]
    }

    /// Length of every (padded) sequence.
    pub fn seq_len(&self) -> usize {
        self.padding.dims()[1]
    }

    /// The device the batch lives on.
    pub fn device(&self) -> B::Device {
        self.padding.device()
    }
}

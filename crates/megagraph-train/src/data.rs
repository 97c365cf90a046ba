use burn::tensor::{Bool, Int, Tensor, TensorData, backend::Backend};
use megagraph_graph::distance::{DistanceIndex, DistanceScope, distance_indexes_with_progress};
use megagraph_graph::sequence::{SequenceStrategy, node_sequences_with_progress};
use megagraph_graph::Dataset;
use megagraph_kernels::DistanceBias;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use megagraph_models::{GraphBatch, NodeInput};

use crate::error::Result;
use crate::progress::PrepareProgress;
use crate::trainer::Quiet;

/// Which split a node belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitRole {
    /// Not in any split (or unlabelled).
    None,
    /// Training node.
    Train,
    /// Validation node.
    Valid,
    /// Test node.
    Test,
}

/// How a [`SequenceDataset`] is built from a [`Dataset`].
#[derive(Clone, Copy, Debug)]
pub struct SequenceOptions {
    /// Nodes per sequence.
    pub seq_len: usize,
    /// How nodes are grouped.
    pub strategy: SequenceStrategy,
    /// Largest exact shortest-path distance.
    pub max_distance: u8,
    /// Where distances are measured.
    pub scope: DistanceScope,
    /// Seed of the grouping.
    pub seed: u64,
}

/// A graph dataset as node sequences with their structural inputs: what a Graph Transformer
/// trains on. Every node is in exactly one sequence.
pub struct SequenceDataset {
    /// The underlying graph, features, labels and split.
    pub dataset: Dataset,
    /// Node ids of each sequence (at most `seq_len` each).
    pub sequences: Vec<Vec<u32>>,
    /// Distance index of each sequence.
    pub distances: Vec<DistanceIndex>,
    /// Padded sequence length.
    pub seq_len: usize,
    /// Number of distance buckets (`max_distance + 2`).
    pub num_buckets: usize,
    roles: Vec<SplitRole>,
}

/// One batch of sequences: the model input and the per-position targets.
#[derive(Clone, Debug)]
pub struct NodeBatch<B: Backend> {
    /// Model input.
    pub graph: GraphBatch<B>,
    /// Class of each position, `[batch, seq]` (0 for padding and unlabelled nodes).
    pub labels: Tensor<B, 2, Int>,
    /// 1.0 where the position is a training node, else 0.0, `[batch, seq]`.
    pub train_weight: Tensor<B, 2>,
    /// Host copy of the node at each position (`None` = padding), row-major `[batch, seq]`.
    pub nodes: Vec<Option<u32>>,
}

impl SequenceDataset {
    /// Groups the dataset's nodes into sequences and computes their distance indexes (in parallel).
    pub fn new(dataset: Dataset, options: SequenceOptions) -> Result<Self> {
        Self::with_progress(dataset, options, &Quiet)
    }

    /// [`new`](Self::new), reporting the partitioning (in nodes) and the distance indexes (in
    /// sequences) to `progress`.
    pub fn with_progress(dataset: Dataset, options: SequenceOptions, progress: &dyn PrepareProgress) -> Result<Self> {
        let graph = &dataset.graph;
        progress.start("sequences", graph.num_nodes(), "nodes");
        let advance = |done| progress.advance(done);
        let sequences = node_sequences_with_progress(graph, options.seq_len, options.strategy, options.seed, &advance);
        progress.finish();
        progress.start("distance indexes", sequences.len(), "sequences");
        let distances =
            distance_indexes_with_progress(graph, &sequences, options.max_distance, options.scope, &advance);
        progress.finish();
        let distances = distances?;
        let mut roles = vec![SplitRole::None; dataset.graph.num_nodes()];
        for (ids, role) in [
            (&dataset.split.train, SplitRole::Train),
            (&dataset.split.valid, SplitRole::Valid),
            (&dataset.split.test, SplitRole::Test),
        ] {
            for &id in ids {
                roles[id as usize] = role;
            }
        }
        Ok(Self {
            dataset,
            sequences,
            distances,
            seq_len: options.seq_len,
            num_buckets: options.max_distance as usize + 2,
            roles,
        })
    }

    /// Number of sequences.
    pub fn num_sequences(&self) -> usize {
        self.sequences.len()
    }

    /// The split a node belongs to.
    pub fn role(&self, node: u32) -> SplitRole {
        self.roles[node as usize]
    }

    /// Whether `node` is a labelled node of `role` (one that counts in that split's loss and
    /// accuracy).
    pub fn is_scored(&self, node: u32, role: SplitRole) -> bool {
        role != SplitRole::None && self.role(node) == role && self.dataset.labels[node as usize] >= 0
    }

    /// Whether `node` counts in the training loss: a labelled node of the training split.
    pub fn is_train_node(&self, node: u32) -> bool {
        self.is_scored(node, SplitRole::Train)
    }

    /// Number of training nodes among `nodes` (e.g. a [`NodeBatch`]'s `nodes`): the normalizer
    /// of a step's loss.
    pub fn train_nodes(&self, nodes: &[Option<u32>]) -> usize {
        nodes.iter().flatten().filter(|&&node| self.is_train_node(node)).count()
    }

    /// Builds the batch of the sequences at `indices` on `device`.
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn batch<B: Backend>(&self, indices: &[usize], device: &B::Device) -> NodeBatch<B> {
        self.batch_with_structure_dropout(indices, device, None)
    }

    /// Like [`batch`](Self::batch), but each off-diagonal pair of a sequence is, with probability
    /// `p`, moved to the "farther" distance bucket (structure dropout: a DropEdge-style regularizer
    /// on the spatial bias that costs no memory). `dropout = Some((p, seed))`; `None` = none.
    /// The draws of a sequence depend only on `seed` and its index, not on the rest of the batch.
    pub fn batch_with_structure_dropout<B: Backend>(
        &self,
        indices: &[usize],
        device: &B::Device,
        dropout: Option<(f64, u64)>,
    ) -> NodeBatch<B> {
        let (batch, seq) = (indices.len(), self.seq_len);
        let graph = &self.dataset.graph;
        let far = (self.num_buckets - 1) as u8;
        let mut nodes = vec![None; batch * seq];
        let mut distance = vec![far; batch * seq * seq];
        for (b, &index) in indices.iter().enumerate() {
            let members = &self.sequences[index];
            let bytes = self.distances[index].as_bytes();
            let len = members.len();
            for (i, &node) in members.iter().enumerate() {
                nodes[b * seq + i] = Some(node);
                let row = (b * seq + i) * seq;
                distance[row..row + len].copy_from_slice(&bytes[i * len..(i + 1) * len]);
            }
        }
        if let Some((p, seed)) = dropout.filter(|(p, _)| *p > 0.0) {
            // one stream per sequence, keyed by its index: the same sequence gets the same
            // pairs dropped whichever batch (or data-parallel shard) it is in
            for (b, &index) in indices.iter().enumerate() {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let block = &mut distance[b * seq * seq..(b + 1) * seq * seq];
                for (pair, bucket) in block.iter_mut().enumerate() {
                    if pair / seq != pair % seq && rng.random::<f64>() < p {
                        *bucket = far;
                    }
                }
            }
        }
        let per_node = |f: &dyn Fn(u32) -> i64| -> Vec<i64> { nodes.iter().map(|n| n.map_or(0, f)).collect() };
        let in_degree = per_node(&|n| graph.in_degrees()[n as usize] as i64);
        let out_degree = per_node(&|n| graph.out_degrees()[n as usize] as i64);
        let labels = per_node(&|n| self.dataset.labels[n as usize].max(0));
        let train_weight: Vec<f32> = nodes
            .iter()
            .map(|n| match n {
                Some(n) if self.is_train_node(*n) => 1.0,
                _ => 0.0,
            })
            .collect();
        let padding: Vec<bool> = nodes.iter().map(Option::is_none).collect();

        let input = match &self.dataset.features {
            Some(features) => {
                let dim = features.dim;
                let mut values = vec![0.0f32; batch * seq * dim];
                for (slot, node) in nodes.iter().enumerate() {
                    if let Some(n) = node {
                        let src = *n as usize * dim;
                        values[slot * dim..(slot + 1) * dim].copy_from_slice(&features.values[src..src + dim]);
                    }
                }
                NodeInput::Features(Tensor::from_data(TensorData::new(values, [batch, seq, dim]), device))
            }
            None => NodeInput::Ids(int_tensor(per_node(&|n| n as i64), [batch, seq], device)),
        };
        let distance = DistanceBias::<B>::index_from_u8(distance, [batch, seq, seq], device)
            .expect("the distance buffer is built with the batch's shape");
        NodeBatch {
            graph: GraphBatch {
                input,
                in_degree: int_tensor(in_degree, [batch, seq], device),
                out_degree: int_tensor(out_degree, [batch, seq], device),
                distance,
                padding: Tensor::<B, 2, Bool>::from_data(TensorData::new(padding, [batch, seq]), device),
            },
            labels: int_tensor(labels, [batch, seq], device),
            train_weight: Tensor::from_data(TensorData::new(train_weight, [batch, seq]), device),
            nodes,
        }
    }
}

fn int_tensor<B: Backend, const D: usize>(values: Vec<i64>, shape: [usize; D], device: &B::Device) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

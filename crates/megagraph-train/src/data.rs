use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use burn::tensor::{Bool, Int, Tensor, TensorData, backend::Backend};
use megagraph_graph::distance::{BfsBudget, DistanceQuery, DistanceScope, sparse_distance_index_parallel_budgeted};
use megagraph_graph::sequence::{SequenceStrategy, node_sequences_with_progress};
use megagraph_graph::{Dataset, SparseDistanceIndex};
use megagraph_kernels::{BucketIndex, CsrParts, SparseBucketIndex};
use megagraph_models::encoders::EdgePaths;
use megagraph_models::{GraphBatch, NodeInput};
use megagraph_parallel::{BlockBatch, BlockRequest};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::edge_paths::{check_edge_features, edge_paths};
use crate::error::{Result, TrainError};
use crate::prefetch::{RowBuilder, RowLayout, RowPrefetcher};
use crate::progress::PrepareProgress;
use crate::observer::Quiet;

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
    /// The most adjacency entries one BFS source examines ([`BfsBudget`]).
    pub budget: BfsBudget,
}

/// A graph dataset as node sequences with their structural inputs: what a Graph Transformer
/// trains on. Every node is in exactly one sequence.
///
/// Distance indexes are not stored: each batch builds the rows it needs (bounded BFS, parallel
/// over rows) as a sparse index or, where the pairs are dense enough, a dense one
/// ([`BucketIndex::from_row_blocks`]). The training loop asks for the next batches' rows ahead
/// ([`prefetch`](Self::prefetch)), so a background thread builds them while the current step
/// computes. Host memory therefore grows with the graph and a few batches, not with `N · S`.
pub struct SequenceDataset {
    /// The underlying graph, features, labels and split.
    pub dataset: Dataset,
    /// Node ids of each sequence (at most `seq_len` each).
    pub sequences: Vec<Vec<u32>>,
    /// Padded sequence length.
    pub seq_len: usize,
    /// Number of distance buckets (`max_distance + 2`).
    pub num_buckets: usize,
    /// Seconds spent partitioning the nodes into sequences.
    pub partition_seconds: f64,
    roles: Vec<SplitRole>,
    /// Cluster sizes of each sequence, once [`reorder_clusters`](Self::reorder_clusters) ran.
    pub(crate) cluster_sizes: Option<Vec<Vec<usize>>>,
    /// Time spent and rows built building distance rows, summed over every call.
    index_work: Arc<IndexWork>,
    /// Builds a block of distance rows (bounded BFS), here or on the prefetcher's thread.
    build_rows: Arc<RowBuilder>,
    prefetcher: RowPrefetcher,
    /// How the sequences and their distances were built.
    options: SequenceOptions,
    /// Whether batches carry edge paths ([`with_edge_paths`](Self::with_edge_paths)).
    edge_paths: bool,
    /// Self-training's pseudo-labels ([`set_pseudo_labels`](Self::set_pseudo_labels)): per
    /// node a class that joins the training loss, or -1.
    pseudo_labels: RwLock<Option<Arc<Vec<i64>>>>,
}

/// What building distance rows cost so far, summed over every build (on any thread).
#[derive(Default)]
struct IndexWork {
    /// Nanoseconds spent.
    nanos: AtomicU64,
    /// Query rows built.
    rows: AtomicU64,
}

/// Rows of a batch as a rank computes them: the nodes at each position and their distance rows.
struct HostBlock {
    /// The node at each position (`None` = padding), row-major `[batch, rows]`.
    nodes: Vec<Option<u32>>,
    /// Per sequence the distance rows of the block's rows that hold a node.
    index: Vec<Arc<SparseDistanceIndex>>,
}

/// One batch of sequences: the model input and the per-position targets.
#[derive(Clone, Debug)]
pub struct NodeBatch<B: Backend> {
    /// Model input.
    pub graph: GraphBatch<B>,
    /// Class of each position, `[batch, seq]` (0 for padding and unlabelled nodes; a
    /// pseudo-labelled node's pseudo-label).
    pub labels: Tensor<B, 2, Int>,
    /// 1.0 where the position is a training node (or a pseudo-labelled one, see
    /// [`SequenceDataset::set_pseudo_labels`]), else 0.0, `[batch, seq]`.
    pub train_weight: Tensor<B, 2>,
    /// Host copy of the node at each position (`None` = padding), row-major `[batch, seq]`.
    pub nodes: Vec<Option<u32>>,
}

impl SequenceDataset {
    /// Groups the dataset's nodes into sequences (distance indexes are built per batch).
    ///
    /// # Errors
    /// As [`with_progress`](Self::with_progress).
    pub fn new(dataset: Dataset, options: SequenceOptions) -> Result<Self> {
        Self::with_progress(dataset, options, &Quiet)
    }

    /// [`new`](Self::new), reporting the partitioning (in nodes) to `progress`.
    ///
    /// # Errors
    /// [`TrainError`](crate::error::TrainError) from the graph when `max_distance` is too large
    /// for `u8` buckets.
    pub fn with_progress(dataset: Dataset, options: SequenceOptions, progress: &dyn PrepareProgress) -> Result<Self> {
        let graph = &dataset.graph;
        // checks max_distance before any work (batches then build their rows without errors)
        if graph.num_nodes() > 0 {
            SparseDistanceIndex::new(graph, &[0], 0..1, options.max_distance, options.scope)?;
        }
        progress.start("sequences", graph.num_nodes(), "nodes");
        let advance = |done| progress.advance(done);
        let started = Instant::now();
        let sequences = node_sequences_with_progress(graph, options.seq_len, options.strategy, options.seed, &advance);
        let partition_seconds = started.elapsed().as_secs_f64();
        progress.finish();
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
        let index_work = Arc::new(IndexWork::default());
        let build = row_builder(&dataset, options, index_work.clone());
        Ok(Self {
            dataset,
            sequences,
            seq_len: options.seq_len,
            num_buckets: options.max_distance as usize + 2,
            partition_seconds,
            roles,
            cluster_sizes: None,
            index_work,
            build_rows: build.clone(),
            prefetcher: RowPrefetcher::new(build),
            options,
            edge_paths: false,
            pseudo_labels: RwLock::new(None),
        })
    }

    /// The dataset with edge paths in every [`batch`](Self::batch): per pair one shortest path
    /// within `max_distance` hops (in the sequences' distance scope) as rows of the batch's edge
    /// features, for a model with an edge encoding. Built per batch, from the same graph and
    /// rules as the distance rows; structure dropout does not touch them. Returns the edge
    /// feature width.
    ///
    /// # Errors
    /// [`TrainError::InvalidConfig`](crate::TrainError::InvalidConfig) naming
    /// `model.edge_encoding` when the dataset has no edge features.
    pub fn with_edge_paths(&mut self) -> Result<usize> {
        let dim = check_edge_features(&self.dataset)?;
        self.edge_paths = true;
        Ok(dim)
    }

    /// Whether batches carry edge paths (see [`with_edge_paths`](Self::with_edge_paths)).
    pub fn has_edge_paths(&self) -> bool {
        self.edge_paths
    }

    /// The distance rows `rows` (clipped to the sequence) of sequence `index`: prefetched ones
    /// when [`prefetch`](Self::prefetch) asked for them, else built now.
    ///
    /// # Panics
    /// If `index` is out of range.
    pub fn distance_rows(&self, index: usize, rows: Range<usize>) -> Arc<SparseDistanceIndex> {
        let members = &self.sequences[index];
        let rows = clipped(rows, members.len());
        if let Some(built) = self.prefetcher.take((index, rows.start, rows.end)) {
            return built;
        }
        Arc::new((self.build_rows)(members, rows))
    }

    /// Starts building, on a background thread, the distance rows the batches `upcoming` will
    /// read under `layout` (the context-parallel blocks of each sequence, each read by
    /// `layout.readers` pipeline stages). A later [`batch`](Self::batch) or
    /// [`block`](Self::block) takes them instead of building them; results are the same either
    /// way. The dataset keeps the blocks of `upcoming` and of one more batch at most (older
    /// ones are dropped unread), so host memory stays bounded by a few batches.
    pub fn prefetch(&self, upcoming: &[&[usize]], layout: RowLayout) {
        let cp = layout.cp.max(1);
        let mut blocks = Vec::new();
        let mut largest = 0;
        for batch in upcoming {
            largest = largest.max(batch.len() * cp);
            for &index in batch.iter() {
                let Some(members) = self.sequences.get(index) else {
                    continue;
                };
                for position in 0..cp {
                    let request = BlockRequest {
                        cp,
                        position,
                        with_input: false,
                    };
                    let rows = clipped(request.rows(self.seq_len), members.len());
                    if rows.is_empty() {
                        // past the sequence's end: nothing to build
                        continue;
                    }
                    blocks.push(((index, rows.start, rows.end), members.clone()));
                }
            }
        }
        if !blocks.is_empty() {
            let capacity = blocks.len() + largest;
            self.prefetcher.request(blocks, layout.readers, capacity);
        }
    }

    /// Pairs per query row that this dataset's sparse distance index stores (the nodes within
    /// `max_distance`, itself included), the mean over a sample of rows rounded up: up to 64
    /// evenly spaced rows of each of up to 8 evenly spaced sequences. What the planner's
    /// memory model needs to count the index as the runtime holds it.
    pub fn near_pairs_per_row(&self) -> usize {
        let count = self.num_sequences();
        let (mut stored, mut rows) = (0usize, 0usize);
        for k in 0..count.min(8) {
            let index = k * count / count.min(8);
            let len = self.sequences[index].len();
            for r in 0..len.min(64) {
                let row = r * len / len.min(64);
                stored += self.distance_rows(index, row..row + 1).nnz();
                rows += 1;
            }
        }
        stored.div_ceil(rows.max(1))
    }

    /// Reads of distance rows that [`prefetch`](Self::prefetch) asked for, so far (built on the
    /// background thread, or by the reader that found them still queued).
    pub fn prefetched_reads(&self) -> u64 {
        self.prefetcher.hits()
    }

    /// Seconds spent building distance rows so far, summed over every build (on the background
    /// thread too; builds on several threads at once each count).
    pub fn index_seconds(&self) -> f64 {
        self.index_work.nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Distance rows (one per query node) built so far, summed over every build, prefetched or
    /// not (a row built twice counts twice).
    pub fn index_rows_built(&self) -> u64 {
        self.index_work.rows.load(Ordering::Relaxed)
    }

    /// The rows `rows` of the sequences `indices` padded to the dataset's `seq_len`: their nodes
    /// and distance rows (sequences in parallel, and rows in parallel within each).
    fn host_block(&self, indices: &[usize], rows: Range<usize>) -> HostBlock {
        let nodes = self.host_nodes(indices, rows.clone());
        let index = indices.par_iter().map(|&index| self.distance_rows(index, rows.clone())).collect();
        HostBlock { nodes, index }
    }

    /// The node at each of the rows `rows` of the sequences `indices` (`None` = padding),
    /// row-major `[batch, rows]`.
    fn host_nodes(&self, indices: &[usize], rows: Range<usize>) -> Vec<Option<u32>> {
        let width = rows.len();
        let mut nodes = vec![None; indices.len() * width];
        for (b, &index) in indices.iter().enumerate() {
            let members = &self.sequences[index];
            for (slot, i) in rows.clone().enumerate() {
                nodes[b * width + slot] = members.get(i).copied();
            }
        }
        nodes
    }

    /// Number of sequences.
    pub fn num_sequences(&self) -> usize {
        self.sequences.len()
    }

    /// One line for a log or terminal: the dataset's name, node, edge and class counts, and its
    /// sequences (`cora: 2708 nodes, 10556 edges, 7 classes, 11 sequences of <= 256 nodes`).
    pub fn summary(&self) -> String {
        let d = &self.dataset;
        format!(
            "{}: {} nodes, {} edges, {} classes, {} sequences of <= {} nodes",
            d.name,
            d.graph.num_nodes(),
            d.graph.num_edges(),
            d.num_classes,
            self.num_sequences(),
            self.seq_len
        )
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

    /// Whether `node` is a labelled node of the training split.
    pub fn is_train_node(&self, node: u32) -> bool {
        self.is_scored(node, SplitRole::Train)
    }

    /// Sets self-training's pseudo-labels: `labels[v]`, a class or -1, for every node `v`. A
    /// pseudo-labelled node joins the training loss with that class as its target (in the
    /// batches' `labels` and `train_weight`), as a training node does; its own split, and the
    /// accuracies measured on it, are unchanged. `None` removes them.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] (field `pseudo_labels`) when `labels` does not hold one
    /// entry per node, a class is out of range, or a training or validation node has one.
    pub fn set_pseudo_labels(&self, labels: Option<Vec<i64>>) -> Result<()> {
        if let Some(labels) = &labels {
            let dataset = &self.dataset;
            let refuse = |reason: String| Err(TrainError::InvalidConfig { field: "pseudo_labels", reason });
            if labels.len() != dataset.num_nodes() {
                return refuse(format!("{} labels for {} nodes", labels.len(), dataset.num_nodes()));
            }
            for (node, &label) in labels.iter().enumerate() {
                if label >= dataset.num_classes as i64 || label < -1 {
                    return refuse(format!("node {node}: class {label} of {} classes", dataset.num_classes));
                }
                let role = self.roles[node];
                if label >= 0 && matches!(role, SplitRole::Train | SplitRole::Valid) {
                    return refuse(format!("node {node} is a {role:?} node"));
                }
            }
        }
        *self.pseudo_labels.write().unwrap_or_else(PoisonError::into_inner) = labels.map(Arc::new);
        Ok(())
    }

    /// The pseudo-labels set by [`set_pseudo_labels`](Self::set_pseudo_labels), if any.
    pub fn pseudo_labels(&self) -> Option<Arc<Vec<i64>>> {
        self.pseudo_labels.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The target of each node in the training loss, `None` for a node that takes no part: its
    /// label for a training node, its pseudo-label for a pseudo-labelled one. The pseudo-labels
    /// are read once, when it is called.
    fn loss_targets(&self) -> impl Fn(u32) -> Option<i64> + '_ {
        let pseudo = self.pseudo_labels();
        move |node| {
            if self.is_train_node(node) {
                return Some(self.dataset.labels[node as usize]);
            }
            pseudo.as_ref().map(|labels| labels[node as usize]).filter(|&label| label >= 0)
        }
    }

    /// Whether `node` counts in the training loss: a labelled node of the training split, or a
    /// pseudo-labelled node.
    pub fn is_loss_node(&self, node: u32) -> bool {
        self.loss_targets()(node).is_some()
    }

    /// Number of `nodes` that count in the training loss ([`is_loss_node`](Self::is_loss_node)).
    pub(crate) fn loss_nodes(&self, nodes: impl IntoIterator<Item = u32>) -> usize {
        let target = self.loss_targets();
        nodes.into_iter().filter(|&node| target(node).is_some()).count()
    }

    /// Number of nodes among `nodes` (e.g. a [`NodeBatch`]'s `nodes`) that count in the
    /// training loss ([`is_loss_node`](Self::is_loss_node)): the normalizer of a step's loss.
    pub fn train_nodes(&self, nodes: &[Option<u32>]) -> usize {
        self.loss_nodes(nodes.iter().flatten().copied())
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
        let seq = self.seq_len;
        self.node_batch(indices, self.block(indices, 0..seq, seq, true, device, dropout), device)
    }

    /// Like [`batch`](Self::batch), but without distance rows: the index reads every pair as
    /// "farther" and nothing is built for it (no BFS, no prefetch read). For sparse attention,
    /// whose core reads no spatial bias; full attention on such a batch has no spatial bias.
    ///
    /// # Panics
    ///
    /// If an index is out of range.
    pub fn batch_without_distances<B: Backend>(&self, indices: &[usize], device: &B::Device) -> NodeBatch<B> {
        let seq = self.seq_len;
        let nodes = self.host_nodes(indices, 0..seq);
        let offsets = vec![0u64; indices.len() * seq + 1];
        let empty = CsrParts {
            row_offsets: &offsets,
            columns: &[],
            buckets: &[],
        };
        let far = self.options.max_distance + 1;
        let index_rows = SparseBucketIndex::from_csr(empty, [indices.len(), seq], seq, far, device)
            .expect("an index without pairs is consistent")
            .into();
        let block = self.block_tensors(nodes, index_rows, [indices.len(), seq], true, device);
        self.node_batch(indices, block, device)
    }

    /// The batch of the sequences `indices` from their whole-sequence `block`, with the edge
    /// paths when batches carry them.
    fn node_batch<B: Backend>(&self, indices: &[usize], block: NodeBlock<B>, device: &B::Device) -> NodeBatch<B> {
        let NodeBlock { block, nodes } = block;
        let edge_paths = self.edge_paths.then(|| self.sequence_edge_paths(indices, 0..self.seq_len, self.seq_len, device));
        NodeBatch {
            graph: GraphBatch {
                input: block.input.expect("asked for the node input"),
                in_degree: block.in_degree,
                out_degree: block.out_degree,
                distance: block.index_rows,
                padding: block.padding,
                edge_paths,
                label_input: None,
            },
            labels: block.labels,
            train_weight: block.weight,
            nodes,
        }
    }

    /// The edge paths of the rows `rows` of the sequences `indices` padded to `frame` positions
    /// ([`edge_paths`]).
    fn sequence_edge_paths<B: Backend>(&self, indices: &[usize], rows: Range<usize>, frame: usize, device: &B::Device) -> EdgePaths<B> {
        let members: Vec<&[u32]> = indices.iter().map(|&index| self.sequences[index].as_slice()).collect();
        let SequenceOptions { max_distance, scope, .. } = self.options;
        edge_paths(&self.dataset, &members, rows, frame, max_distance, scope, device)
    }

    /// The rows `rows` of the batch of the sequences `indices`, each padded to `frame ≥ seq_len`
    /// positions (the key columns of the index): what one rank of a context-parallel ring
    /// computes, built without the other rows. The node input only when `with_input` (the
    /// embedding stage). `dropout` as in
    /// [`batch_with_structure_dropout`](Self::batch_with_structure_dropout): the same pairs are
    /// dropped whichever rows are built. With [`with_edge_paths`](Self::with_edge_paths), a block
    /// with its node input also carries the edge paths of its rows over the `frame` columns
    /// (the embedding stage computes the edge encoding's rows of the block).
    ///
    /// # Panics
    ///
    /// If an index is out of range or `frame < seq_len`.
    pub fn block<B: Backend>(
        &self,
        indices: &[usize],
        rows: Range<usize>,
        frame: usize,
        with_input: bool,
        device: &B::Device,
        dropout: Option<(f64, u64)>,
    ) -> NodeBlock<B> {
        assert!(frame >= self.seq_len, "frame {frame} is shorter than the sequences ({})", self.seq_len);
        let width = rows.len();
        let HostBlock { nodes, index } = self.host_block(indices, rows.clone());
        let blocks: Vec<&SparseDistanceIndex> = index.iter().map(|rows| &**rows).collect();
        let dropped = dropout
            .filter(|(p, _)| *p > 0.0)
            .map(|(p, seed)| self.dropped_pairs(indices, rows.clone(), p, seed));
        let keep = |b: usize, i: usize, column: u32| {
            dropped.as_ref().is_none_or(|dropped| !dropped[b][i * self.seq_len + column as usize])
        };
        let index_rows = BucketIndex::from_row_blocks_where(&blocks, [width, frame], keep, device)
            .expect("row blocks fit the batch frame");
        let mut block = self.block_tensors(nodes, index_rows, [indices.len(), width], with_input, device);
        if self.edge_paths && with_input {
            block.block.edge_paths = Some(self.sequence_edge_paths(indices, rows, frame, device));
        }
        block
    }

    /// The tensors of a block of `[batch, width]` positions holding `nodes`, with the distance
    /// index `index_rows`; the node input only when `with_input`.
    fn block_tensors<B: Backend>(
        &self,
        nodes: Vec<Option<u32>>,
        index_rows: BucketIndex<B>,
        [batch, width]: [usize; 2],
        with_input: bool,
        device: &B::Device,
    ) -> NodeBlock<B> {
        let graph = &self.dataset.graph;
        let per_node = |f: &dyn Fn(u32) -> i64| -> Vec<i64> { nodes.iter().map(|n| n.map_or(0, f)).collect() };
        let in_degree = per_node(&|n| graph.in_degrees()[n as usize] as i64);
        let out_degree = per_node(&|n| graph.out_degrees()[n as usize] as i64);
        let target = self.loss_targets();
        let labels = per_node(&|n| target(n).unwrap_or(self.dataset.labels[n as usize]).max(0));
        let train_weight: Vec<f32> = nodes
            .iter()
            .map(|n| match n {
                Some(n) if target(*n).is_some() => 1.0,
                _ => 0.0,
            })
            .collect();
        let padding: Vec<bool> = nodes.iter().map(Option::is_none).collect();

        let input = with_input.then(|| match &self.dataset.features {
            Some(features) => {
                let dim = features.dim;
                let mut values = vec![0.0f32; batch * width * dim];
                for (slot, node) in nodes.iter().enumerate() {
                    if let Some(n) = node {
                        let src = *n as usize * dim;
                        values[slot * dim..(slot + 1) * dim].copy_from_slice(&features.values[src..src + dim]);
                    }
                }
                NodeInput::Features(Tensor::from_data(TensorData::new(values, [batch, width, dim]), device))
            }
            None => NodeInput::Ids(int_tensor(per_node(&|n| n as i64), [batch, width], device)),
        });
        NodeBlock {
            block: BlockBatch {
                input,
                in_degree: int_tensor(in_degree, [batch, width], device),
                out_degree: int_tensor(out_degree, [batch, width], device),
                index_rows,
                padding: Tensor::<B, 2, Bool>::from_data(TensorData::new(padding, [batch, width]), device),
                labels: int_tensor(labels, [batch, width], device),
                weight: Tensor::from_data(TensorData::new(train_weight, [batch, width]), device),
                edge_paths: None,
            },
            nodes,
        }
    }

    /// Structure dropout's draws for the rows `rows` of the sequences `indices`: per sequence a
    /// `[rows, seq_len]` mask of the dropped pairs. One stream per sequence keyed by its index;
    /// the stream visits the `seq_len x seq_len` off-diagonal pairs in row-major order, so any
    /// block of rows gets the draws the whole sequence would (the stream skips ahead to the
    /// block's first row).
    fn dropped_pairs(&self, indices: &[usize], rows: Range<usize>, p: f64, seed: u64) -> Vec<Vec<bool>> {
        let seq = self.seq_len;
        indices
            .iter()
            .map(|&index| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                // draws before the block: every off-diagonal pair of the rows above it (one
                // `f64` draw is one `u64`, two 32-bit words of the stream)
                let draws_before = (rows.start * seq - rows.start.min(seq)) as u128;
                rng.set_word_pos(2 * draws_before);
                let mut dropped = vec![false; rows.len() * seq];
                // rows past `seq_len` (context-parallel padding) hold no pairs and draw nothing
                for (slot, i) in rows.clone().take_while(|&i| i < seq).enumerate() {
                    for j in 0..seq {
                        if i != j && rng.random::<f64>() < p {
                            dropped[slot * seq + j] = true;
                        }
                    }
                }
                dropped
            })
            .collect()
    }
}

/// Rows of a batch of sequences ([`SequenceDataset::block`]): a rank's share of a micro-batch
/// (or, with every row, the whole batch) and the nodes at its positions.
#[derive(Clone, Debug)]
pub struct NodeBlock<B: Backend> {
    /// The rows' model inputs and targets, as a mesh rank takes them.
    pub block: BlockBatch<B>,
    /// Host copy of the node at each position (`None` = padding), row-major `[batch, rows]`.
    pub nodes: Vec<Option<u32>>,
}

fn int_tensor<B: Backend, const D: usize>(values: Vec<i64>, shape: [usize; D], device: &B::Device) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// `rows` clipped to a sequence of `len` members: the rows [`SequenceDataset::distance_rows`]
/// builds, and the key its prefetched blocks are stored under.
fn clipped(rows: Range<usize>, len: usize) -> Range<usize> {
    rows.start.min(len)..rows.end.min(len)
}

/// Builds distance rows of `dataset`'s sequences as `options` say, adding the time and the rows
/// to `work`.
fn row_builder(dataset: &Dataset, options: SequenceOptions, work: Arc<IndexWork>) -> Arc<RowBuilder> {
    let graph = dataset.graph.clone();
    Arc::new(move |members: &[u32], rows: Range<usize>| {
        let started = Instant::now();
        let query = DistanceQuery::exact(options.max_distance, options.scope).with_budget(options.budget);
        let index = sparse_distance_index_parallel_budgeted(&graph, members, rows, query, &|_| {})
        .expect("sequences are valid node lists and max_distance was checked at construction");
        work.nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        work.rows.fetch_add(index.len() as u64, Ordering::Relaxed);
        index
    })
}

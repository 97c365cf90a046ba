//! The real model behind a [`ModelShape`], and [`SyntheticSource`]: random batches of that
//! shape for the profiler and for validation runs (time and memory do not depend on the values).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use megagraph_kernels::{BucketIndex, CsrParts, DistanceBias, SparseBucketIndex, sparse_is_smaller};
use megagraph_models::{GraphBatch, GraphTransformer, GraphTransformerConfig, NodeInput, materialize};
use megagraph_parallel::{BatchSource, BlockBatch, BlockRequest, TrainBatch, padded_len};
use megagraph_planner::ModelShape;

use crate::edges::SequenceEdges;
use crate::split_mix::SplitMix;

/// The Graph Transformer configuration of `shape`: node features of `shape.feature_dim`, no
/// dropout (so every rank computes the same thing), the shape's encodings and key tile.
///
/// `distance_buckets` must be at least 2 and at most 257 (a `u8` index with `max_distance + 2`
/// buckets); smaller or larger values are clamped. With `edge_feature_dim > 0` the model has an
/// edge encoding over paths of `max_distance` hops (which must then be at least 1).
pub fn model_config(shape: &ModelShape) -> GraphTransformerConfig {
    let max_distance = shape.distance_buckets.clamp(2, 257) - 2;
    GraphTransformerConfig::new(0, shape.num_classes)
        .with_feature_dim(Some(shape.feature_dim))
        .with_num_layers(shape.layers)
        .with_num_heads(shape.heads)
        .with_hidden(shape.hidden)
        .with_ffn_hidden(shape.ffn_hidden)
        .with_dropout(0.0)
        .with_input_dropout(0.0)
        .with_key_dropout(0.0)
        .with_max_degree(shape.degree_buckets.max(1) - 1)
        .with_max_distance(max_distance as u8)
        .with_block_size(shape.key_tile)
        .with_edge_encoding((shape.edge_feature_dim > 0).then_some(shape.edge_feature_dim))
}

/// The shape of the model `config` builds (the inverse of [`model_config`] up to dropout). A
/// model without node features (node-id embeddings) counts as `feature_dim = 1`: its input costs
/// one row lookup per node.
pub fn model_shape(config: &GraphTransformerConfig) -> ModelShape {
    ModelShape {
        layers: config.num_layers,
        heads: config.num_heads,
        hidden: config.hidden,
        ffn_hidden: config.ffn_hidden,
        feature_dim: config.feature_dim.unwrap_or(1),
        num_classes: config.num_classes,
        distance_buckets: config.num_buckets(),
        degree_buckets: config.max_degree + 1,
        key_tile: config.block_size,
        edge_feature_dim: config.edge_encoding.unwrap_or(0),
    }
}

/// An initialized model of `shape` on `device`, every parameter materialized (so that clones
/// hold the same values).
pub fn init_model<B: Backend>(shape: &ModelShape, device: &B::Device) -> GraphTransformer<B> {
    materialize(model_config(shape).init(device))
}

/// `len` random distance buckets below `buckets` (`u8`).
pub(crate) fn random_buckets(rng: &mut SplitMix, len: usize, buckets: usize) -> Vec<u8> {
    let buckets = buckets.clamp(1, 256) as u64;
    (0..len).map(|_| rng.below(buckets) as u8).collect()
}

/// Random sequences of a model shape: features, degrees, a distance index, labels and
/// training weights (every other node), for measuring time and memory.
///
/// The index is dense `u8` with random buckets, or, [`with_near_pairs`](Self::with_near_pairs),
/// a sparse one storing that many pairs per row (the row's own node and random others; every
/// other pair reads as the "farther" bucket) in the layout the runtime would pick for that fill.
///
/// One random sequence is drawn when the source is built and every requested sequence is a copy
/// of it: a batch costs a copy, not a random draw, so that the runtime's steps are not slowed by
/// data generation. A rank's block of a dense sequence that `cp` divides holds only its rows
/// (as the training data does), so that its memory is what the runtime needs. For a shape with
/// an edge encoding the sequence also has random edge paths ([`SequenceEdges`]), which the
/// embedding stage's block of whole sequences carries.
#[derive(Clone, Debug)]
pub struct SyntheticSource {
    seq_len: usize,
    feature_dim: usize,
    features: Vec<f32>,
    degrees: Vec<i64>,
    distance: Vec<u8>,
    /// With near pairs: the stored pairs of every row, `(columns, buckets)` row after row.
    near: Option<NearPairs>,
    buckets: usize,
    labels: Vec<i64>,
    weight: Vec<f32>,
    /// The sequence's random edge paths, for a shape with an edge encoding.
    edges: Option<SequenceEdges>,
}

/// The stored pairs of one sparse sequence: `per_row` pairs in every row.
#[derive(Clone, Debug)]
struct NearPairs {
    per_row: usize,
    columns: Vec<u32>,
    buckets: Vec<u8>,
}

impl SyntheticSource {
    /// Sequences of `seq_len` nodes for a model of `shape`, drawn from `seed`.
    pub fn new(shape: &ModelShape, seq_len: usize, seed: u64) -> Self {
        let mut rng = SplitMix::new(seed);
        let s = seq_len;
        Self {
            seq_len: s,
            feature_dim: shape.feature_dim,
            features: (0..s * shape.feature_dim).map(|_| rng.unit()).collect(),
            degrees: (0..s)
                .map(|_| rng.below(shape.degree_buckets as u64) as i64)
                .collect(),
            distance: random_buckets(&mut rng, s * s, shape.distance_buckets),
            near: None,
            buckets: shape.distance_buckets,
            labels: (0..s)
                .map(|_| rng.below(shape.num_classes as u64) as i64)
                .collect(),
            weight: (0..s).map(|i| (i % 2) as f32).collect(),
            edges: (shape.edge_feature_dim > 0)
                .then(|| SequenceEdges::draw(&mut rng, s, shape.edge_hops().max(1), shape.edge_feature_dim)),
        }
    }

    /// The same sequences with a sparse distance index of `per_row` stored pairs per row (at
    /// least 1, at most `seq_len`), drawn from `seed`, when that is under a fifth of the pairs
    /// (the runtime's rule, [`sparse_is_smaller`]); the dense index otherwise.
    pub fn with_near_pairs(mut self, per_row: usize, seed: u64) -> Self {
        let s = self.seq_len;
        let per_row = per_row.clamp(1, s);
        if !sparse_is_smaller(s * per_row, s * s) {
            self.near = None;
            return self;
        }
        let mut rng = SplitMix::new(seed);
        let far = self.buckets.clamp(1, 256) - 1;
        let (mut columns, mut buckets) = (Vec::with_capacity(s * per_row), Vec::with_capacity(s * per_row));
        for i in 0..s {
            // the row's own node (bucket 0) and per_row - 1 other random columns
            let mut row = vec![i as u32];
            while row.len() < per_row {
                let column = rng.below(s as u64) as u32;
                if !row.contains(&column) {
                    row.push(column);
                }
            }
            row.sort_unstable();
            for column in row {
                columns.push(column);
                // near pairs other than the node itself: distances 1 ..= max_distance
                let bucket = if column as usize == i || far < 2 { 0 } else { 1 + rng.below(far as u64 - 1) };
                buckets.push(bucket as u8);
            }
        }
        self.near = Some(NearPairs { per_row, columns, buckets });
        self
    }

    /// Nodes per sequence.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The distance index of `n` copies of the sequence.
    fn index<B: Backend>(&self, n: usize, device: &B::Device) -> Result<BucketIndex<B>, String> {
        let s = self.seq_len;
        let Some(near) = &self.near else {
            let distance: Vec<u8> = (0..n).flat_map(|_| self.distance.iter().copied()).collect();
            return DistanceBias::<B>::index_from_u8(distance, [n, s, s], device)
                .map(Into::into)
                .map_err(|e| e.to_string());
        };
        let row_offsets: Vec<u64> = (0..=n * s).map(|row| (row * near.per_row) as u64).collect();
        let columns: Vec<u32> = (0..n).flat_map(|_| near.columns.iter().copied()).collect();
        let buckets: Vec<u8> = (0..n).flat_map(|_| near.buckets.iter().copied()).collect();
        let far = (self.buckets.clamp(1, 256) - 1) as u8;
        let parts = CsrParts {
            row_offsets: &row_offsets,
            columns: &columns,
            buckets: &buckets,
        };
        SparseBucketIndex::from_csr(parts, [n, s], s, far, device)
            .map(BucketIndex::Sparse)
            .map_err(|e| e.to_string())
    }
}

impl<B: Backend> BatchSource<B> for SyntheticSource {
    fn batch(&self, sequences: &[usize], device: &B::Device) -> Result<TrainBatch<B>, String> {
        let (n, s) = (sequences.len(), self.seq_len);
        let repeat = |v: &[i64]| -> Vec<i64> { (0..n).flat_map(|_| v.iter().copied()).collect() };
        let ints = |v: Vec<i64>| Tensor::from_data(TensorData::new(v, [n, s]), device);
        let features: Vec<f32> = (0..n).flat_map(|_| self.features.iter().copied()).collect();
        let weight: Vec<f32> = (0..n).flat_map(|_| self.weight.iter().copied()).collect();
        Ok(TrainBatch {
            graph: GraphBatch {
                input: NodeInput::Features(Tensor::from_data(
                    TensorData::new(features, [n, s, self.feature_dim]),
                    device,
                )),
                in_degree: ints(repeat(&self.degrees)),
                out_degree: ints(repeat(&self.degrees)),
                distance: self.index(n, device)?,
                padding: Tensor::<B, 2>::zeros([n, s], device).equal_elem(1.0),
                edge_paths: self.edges.as_ref().map(|edges| edges.batch(n, device)),
                label_input: None,
            },
            labels: ints(repeat(&self.labels)),
            train_weight: Tensor::from_data(TensorData::new(weight, [n, s]), device),
        })
    }

    fn block(&self, sequences: &[usize], request: BlockRequest, device: &B::Device) -> Result<BlockBatch<B>, String> {
        if self.near.is_none() && padded_len(self.seq_len, request.cp) == self.seq_len {
            return self.dense_rows(sequences.len(), request, device);
        }
        // sparse or padded: the whole batch, then its block
        BlockBatch::from_whole(self.batch(sequences, device)?, request)
    }

    fn train_nodes(&self, sequences: &[usize]) -> usize {
        sequences.len() * (self.seq_len / 2)
    }
}

impl SyntheticSource {
    /// The block `request` of `n` copies of a dense sequence that `request.cp` divides: each
    /// field holds the block's rows only (the index `[n, block, S]`).
    fn dense_rows<B: Backend>(
        &self,
        n: usize,
        request: BlockRequest,
        device: &B::Device,
    ) -> Result<BlockBatch<B>, String> {
        let s = self.seq_len;
        let rows = request.rows(s);
        let b = rows.len();
        // `width` values per node of the block's rows, for each of the n copies
        fn repeat_rows<T: Copy>(values: &[T], rows: &std::ops::Range<usize>, width: usize, n: usize) -> Vec<T> {
            let part = &values[rows.start * width..rows.end * width];
            (0..n).flat_map(|_| part.iter().copied()).collect()
        }
        let ints = |v: &[i64]| Tensor::from_data(TensorData::new(repeat_rows(v, &rows, 1, n), [n, b]), device);
        let f = self.feature_dim;
        let input = request.with_input.then(|| {
            NodeInput::Features(Tensor::from_data(TensorData::new(repeat_rows(&self.features, &rows, f, n), [n, b, f]), device))
        });
        let distance = repeat_rows(&self.distance, &rows, s, n);
        Ok(BlockBatch {
            input,
            in_degree: ints(&self.degrees),
            out_degree: ints(&self.degrees),
            index_rows: DistanceBias::<B>::index_from_u8(distance, [n, b, s], device)
                .map(Into::into)
                .map_err(|e| e.to_string())?,
            padding: Tensor::<B, 2>::zeros([n, b], device).equal_elem(1.0),
            labels: ints(&self.labels),
            weight: Tensor::from_data(TensorData::new(repeat_rows(&self.weight, &rows, 1, n), [n, b]), device),
            // the embedding stage computes the edge encoding's rows of the block
            edge_paths: match self.edges.as_ref().filter(|_| request.with_input) {
                Some(edges) if request.cp > 1 => {
                    Some(edges.batch(n, device).block_rows(rows.clone(), s).map_err(|e| e.to_string())?)
                }
                edges => edges.map(|edges| edges.batch(n, device)),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    /// A one-layer model with `edge_feature_dim` edge features (0: no edge encoding).
    fn shape(edge_feature_dim: usize) -> ModelShape {
        ModelShape {
            layers: 1,
            heads: 2,
            hidden: 8,
            ffn_hidden: 8,
            feature_dim: 3,
            num_classes: 5,
            distance_buckets: 4,
            degree_buckets: 7,
            key_tile: 4,
            edge_feature_dim,
        }
    }

    #[test]
    fn synthetic_batches_have_the_shape_and_weights() {
        let shape = shape(0);
        let source = SyntheticSource::new(&shape, 6, 1);
        let batch: TrainBatch<Flex> = source.batch(&[0, 1], &Default::default()).unwrap();
        assert_eq!(batch.graph.distance.dims(), [2, 6, 6]);
        let megagraph_kernels::BucketIndex::Dense(distance) = batch.graph.distance.clone() else {
            panic!("a dense index");
        };
        let max = distance.max().into_scalar();
        assert!((max as i64) < 4);
        let weight: f32 = batch.train_weight.sum().into_scalar();
        assert_eq!(
            weight as usize,
            BatchSource::<Flex>::train_nodes(&source, &[0, 1])
        );
        // a block built alone equals the block cut from the whole batch
        for position in 0..3 {
            let request = BlockRequest { cp: 3, position, with_input: true };
            let alone: BlockBatch<Flex> = source.block(&[0, 1], request, &Default::default()).unwrap();
            let cut: BlockBatch<Flex> = BlockBatch::of(source.batch(&[0, 1], &Default::default()).unwrap(), 3, position).unwrap();
            let (Some(NodeInput::Features(a)), Some(NodeInput::Features(b))) = (alone.input, cut.input) else {
                panic!("features in both");
            };
            assert_eq!(a.into_data(), b.into_data());
            assert_eq!(alone.in_degree.into_data(), cut.in_degree.into_data());
            assert_eq!(alone.labels.into_data(), cut.labels.into_data());
            assert_eq!(alone.weight.into_data(), cut.weight.into_data());
            assert_eq!(alone.padding.into_data(), cut.padding.into_data());
            let (BucketIndex::Dense(a), BucketIndex::Dense(b)) = (alone.index_rows, cut.index_rows) else {
                panic!("dense rows in both");
            };
            assert_eq!(a.dims(), [2, 2, 6]);
            assert_eq!(a.into_data(), b.into_data());
        }
        let without_input = BlockRequest { cp: 2, position: 1, with_input: false };
        let block: BlockBatch<Flex> = source.block(&[0], without_input, &Default::default()).unwrap();
        assert!(block.input.is_none());
        let config = model_config(&shape);
        assert_eq!(config.num_buckets(), 4);
        assert_eq!(config.max_degree + 1, 7);
        assert_eq!(model_shape(&config), shape);
    }

    #[test]
    fn a_ring_block_carries_the_edge_paths_of_its_rows() {
        let shape = shape(3);
        let source = SyntheticSource::new(&shape, 6, 1);
        let whole: TrainBatch<Flex> = source.batch(&[0, 1], &Default::default()).unwrap();
        for position in 0..3 {
            let request = BlockRequest { cp: 3, position, with_input: true };
            let alone: BlockBatch<Flex> = source.block(&[0, 1], request, &Default::default()).unwrap();
            let cut: BlockBatch<Flex> = BlockBatch::of(whole.clone(), 3, position).unwrap();
            let (Some(a), Some(b)) = (alone.edge_paths, cut.edge_paths) else {
                panic!("edge paths in both");
            };
            assert_eq!(a.edge_ids.dims(), [2, 2, 6, 2]);
            assert_eq!(a.edge_ids.into_data(), b.edge_ids.into_data());
            assert_eq!(a.inverse_length.dims(), [2, 2, 6]);
            assert_eq!(a.inverse_length.into_data(), b.inverse_length.into_data());
        }
    }
}

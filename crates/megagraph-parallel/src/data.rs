//! Data parallelism and the split of a batch into context blocks.
//!
//! The sequences of a step are split into `dp x micro_batches` contiguous chunks as evenly as
//! possible (replica `d` takes chunks `d * M .. (d + 1) * M`). Every rank asks the
//! [`BatchSource`] for its micro-batch and keeps only the rows of its context block: positions
//! `r * S' / cp .. (r + 1) * S' / cp` of the sequence padded to `S'`, the next multiple of `cp`
//! (padded positions are masked keys with weight 0, so they change nothing).

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Int, Tensor};
use megagraph_kernels::BucketIndex;
use megagraph_models::encoders::EdgePaths;
use megagraph_models::{GraphBatch, NodeInput};

use crate::ParallelError;

/// A batch of sequences with its training targets.
#[derive(Clone, Debug)]
pub struct TrainBatch<B: Backend> {
    /// The model input.
    pub graph: GraphBatch<B>,
    /// Class of each position, `[batch, seq]` (any valid class where the weight is 0).
    pub labels: Tensor<B, 2, Int>,
    /// `1.0` where the position counts in the loss (a training node), else `0.0`, `[batch, seq]`.
    pub train_weight: Tensor<B, 2>,
}

/// Which part of a micro-batch one rank computes: the rows of its context block, and whether it
/// embeds the node inputs (only the first pipeline stage does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRequest {
    /// Context-parallel degree: the sequence is padded to [`padded_len`] and cut in `cp` blocks.
    pub cp: usize,
    /// The rank's position in the context ring, `0..cp`.
    pub position: usize,
    /// Whether the block needs its node inputs (features or ids).
    pub with_input: bool,
}

impl BlockRequest {
    /// The rows of the padded sequence of `seq_len` nodes that this block covers.
    pub fn rows(&self, seq_len: usize) -> std::ops::Range<usize> {
        let block = padded_len(seq_len, self.cp) / self.cp.max(1);
        self.position * block..(self.position + 1) * block
    }
}

/// Where the ranks of a mesh get their micro-batches.
///
/// Shared by every worker thread, so it must be `Send + Sync`; every rank of a micro-batch's
/// context ring and pipeline asks for the same sequences.
pub trait BatchSource<B: Backend>: Send + Sync {
    /// The batch of `sequences` (indices into the source), on `device`.
    ///
    /// # Errors
    ///
    /// Any message; the trainer reports it as [`ParallelError::Source`] naming the rank.
    fn batch(&self, sequences: &[usize], device: &B::Device) -> Result<TrainBatch<B>, String>;

    /// One rank's block of the batch of `sequences` (see [`BlockBatch`]). The default builds the
    /// whole batch with [`batch`](Self::batch) and keeps the block's rows; a source that can
    /// build the rows alone should, so that no rank holds a whole `[batch, S, S]` index or the
    /// node inputs of rows it does not compute.
    ///
    /// # Errors
    ///
    /// Any message; the trainer reports it as [`ParallelError::Source`] naming the rank.
    fn block(
        &self,
        sequences: &[usize],
        request: BlockRequest,
        device: &B::Device,
    ) -> Result<BlockBatch<B>, String> {
        BlockBatch::from_whole(self.batch(sequences, device)?, request)
    }

    /// The number of positions with training weight 1 in `sequences`, computed on the host (no
    /// device work): the normalizer of a step's loss, so that the loss and the summed gradients
    /// of a parallel step equal the single-device ones.
    fn train_nodes(&self, sequences: &[usize]) -> usize;
}

/// Splits a step's `sequences` into `dp` replicas of `micro_batches` micro-batches each,
/// contiguous and as even as possible (sizes differ by at most one).
///
/// # Errors
///
/// [`ParallelError::TooFewSequences`] when some micro-batch would be empty.
pub fn shard_sequences(
    sequences: &[usize],
    dp: usize,
    micro_batches: usize,
) -> Result<Vec<Vec<Vec<usize>>>, ParallelError> {
    let chunks = dp * micro_batches;
    if chunks == 0 || sequences.len() < chunks {
        return Err(ParallelError::TooFewSequences {
            sequences: sequences.len(),
            needed: chunks,
        });
    }
    let base = sequences.len() / chunks;
    let extra = sequences.len() % chunks;
    let mut start = 0;
    let mut all: Vec<Vec<usize>> = Vec::with_capacity(chunks);
    for chunk in 0..chunks {
        let len = base + usize::from(chunk < extra);
        all.push(sequences[start..start + len].to_vec());
        start += len;
    }
    let mut replicas = Vec::with_capacity(dp);
    let mut iter = all.into_iter();
    for _ in 0..dp {
        replicas.push(iter.by_ref().take(micro_batches).collect());
    }
    Ok(replicas)
}

/// The length of a sequence of `seq_len` nodes padded to a multiple of `cp`.
pub fn padded_len(seq_len: usize, cp: usize) -> usize {
    seq_len.div_ceil(cp.max(1)) * cp.max(1)
}

/// One rank's share of a micro-batch: the rows of its context block (see [`BlockRequest`]).
///
/// Every field has the block's rows `[batch, block]` of the sequence padded to a multiple of
/// `cp`; padded positions are masked keys with weight 0.
#[derive(Clone, Debug)]
pub struct BlockBatch<B: Backend> {
    /// Node input of the block, `[batch, block, features]` or `[batch, block]`; `None` when the
    /// rank does not embed (a later pipeline stage).
    pub input: Option<NodeInput<B>>,
    /// `[batch, block]`.
    pub in_degree: Tensor<B, 2, Int>,
    /// `[batch, block]`.
    pub out_degree: Tensor<B, 2, Int>,
    /// Distance index rows of the block's nodes over `[batch, block, padded_seq]`, dense or
    /// sparse.
    pub index_rows: BucketIndex<B>,
    /// `[batch, block]`, `true` = padding.
    pub padding: Tensor<B, 2, Bool>,
    /// `[batch, block]`.
    pub labels: Tensor<B, 2, Int>,
    /// `[batch, block]`.
    pub weight: Tensor<B, 2>,
    /// The edge paths of the block's rows over every column of the padded sequences (see
    /// [`GraphBatch::edge_paths`]), `edge_ids [batch, block, padded_seq, hops]` and
    /// `inverse_length [batch, block, padded_seq]`, for a model with an edge encoding: on the
    /// embedding stage only (`with_input`), which computes the bias's rows of the block.
    pub edge_paths: Option<EdgePaths<B>>,
}

/// `tensor` with dimension `dim` extended to `len` by `value` (unchanged when already `len`).
fn pad_float<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    dim: usize,
    len: usize,
    value: f32,
) -> Tensor<B, D> {
    let mut dims = tensor.dims();
    if dims[dim] >= len {
        return tensor;
    }
    dims[dim] = len - dims[dim];
    let fill = Tensor::full(dims, value, (&tensor.device(), tensor.dtype()));
    Tensor::cat(vec![tensor, fill], dim)
}

/// Like [`pad_float`] for int tensors, keeping the dtype (a `u8` distance index stays `u8`).
fn pad_int<B: Backend, const D: usize>(
    tensor: Tensor<B, D, Int>,
    dim: usize,
    len: usize,
    value: i64,
) -> Tensor<B, D, Int> {
    let mut dims = tensor.dims();
    if dims[dim] >= len {
        return tensor;
    }
    dims[dim] = len - dims[dim];
    let dtype: DType = tensor.dtype();
    let fill = Tensor::full(dims, value, (&tensor.device(), dtype));
    Tensor::cat(vec![tensor, fill], dim)
}

/// `tensor` in storage of its own when it is a block of a larger one (`cp > 1`): a slice may be
/// a view that keeps the whole batch's buffer alive (it is on Flex), and the rank must hold only
/// its block's rows (`S / cp x S` bytes of the distance index), not the whole `S x S`.
fn compact<B: Backend, const D: usize, K>(tensor: Tensor<B, D, K>, cp: usize) -> Tensor<B, D, K>
where
    K: burn::tensor::BasicOps<B>,
{
    if cp <= 1 {
        return tensor;
    }
    let (device, dtype) = (tensor.device(), tensor.dtype());
    Tensor::from_data(tensor.into_data(), (&device, dtype))
}

impl<B: Backend> BlockBatch<B> {
    /// The block `request` asks for, cut from the whole `batch` ([`of`](Self::of)), without its
    /// node inputs unless the request wants them.
    ///
    /// # Errors
    ///
    /// As [`of`](Self::of).
    pub fn from_whole(batch: TrainBatch<B>, request: BlockRequest) -> Result<Self, String> {
        let mut block = Self::of(batch, request.cp, request.position)?;
        if !request.with_input {
            block.input = None;
            block.edge_paths = None;
        }
        Ok(block)
    }

    /// The block of ring position `position` of `cp` in `batch` (a sparse index is read back to
    /// the host to cut its rows).
    ///
    /// # Errors
    ///
    /// A message naming the batch field whose shape disagrees with `padding [batch, seq]`.
    pub fn of(batch: TrainBatch<B>, cp: usize, position: usize) -> Result<Self, String> {
        let [size, seq] = batch.graph.padding.dims();
        let check = |name: &str, dims: &[usize], expected: &[usize]| {
            if dims.len() < expected.len() || dims[..expected.len()] != *expected {
                Err(format!(
                    "`{name}` has shape {dims:?}, expected {expected:?} (from padding [batch, seq])"
                ))
            } else {
                Ok(())
            }
        };
        check("distance", &batch.graph.distance.dims(), &[size, seq, seq])?;
        check("in_degree", &batch.graph.in_degree.dims(), &[size, seq])?;
        check("out_degree", &batch.graph.out_degree.dims(), &[size, seq])?;
        check("labels", &batch.labels.dims(), &[size, seq])?;
        check("train_weight", &batch.train_weight.dims(), &[size, seq])?;
        match &batch.graph.input {
            NodeInput::Features(f) => check("input", &f.dims(), &[size, seq])?,
            NodeInput::Ids(ids) => check("input", &ids.dims(), &[size, seq])?,
        }

        let padded = padded_len(seq, cp);
        let block = padded / cp;
        let rows = position * block..(position + 1) * block;
        let b = 0..size;
        let int2 = |t: Tensor<B, 2, Int>, fill: i64| {
            pad_int(t, 1, padded, fill).slice([b.clone(), rows.clone()])
        };
        let input = match batch.graph.input {
            NodeInput::Features(f) => {
                let width = f.dims()[2];
                NodeInput::Features(compact(
                    pad_float(f, 1, padded, 0.0).slice([b.clone(), rows.clone(), 0..width]),
                    cp,
                ))
            }
            NodeInput::Ids(ids) => NodeInput::Ids(int2(ids, 0)),
        };
        // padded rows and columns get bucket 0 (dense) or the far bucket (sparse): they are
        // masked keys or ignored queries
        let index_rows = match batch.graph.distance {
            BucketIndex::Dense(distance) => BucketIndex::Dense(compact(
                pad_int(pad_int(distance, 2, padded, 0), 1, padded, 0)
                    .slice([b.clone(), rows.clone(), 0..padded]),
                cp,
            )),
            BucketIndex::Sparse(distance) => BucketIndex::Sparse(
                distance
                    .block_rows(rows.clone(), padded)
                    .map_err(|e| e.to_string())?,
            ),
        };
        // the block's rows of every pair's path; padded rows and columns have none
        let edge_paths = match batch.graph.edge_paths {
            Some(paths) if cp > 1 => Some(paths.block_rows(rows.clone(), padded).map_err(|e| e.to_string())?),
            paths => paths,
        };
        let padding = pad_int(batch.graph.padding.int(), 1, padded, 1)
            .slice([b.clone(), rows.clone()])
            .equal_elem(1);
        Ok(Self {
            input: Some(input),
            in_degree: int2(batch.graph.in_degree, 0),
            out_degree: int2(batch.graph.out_degree, 0),
            index_rows,
            padding,
            labels: int2(batch.labels, 0),
            weight: pad_float(batch.train_weight, 1, padded, 0.0).slice([b, rows]),
            edge_paths,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type B = Flex;

    #[test]
    fn shards_are_contiguous_and_even() {
        let seqs: Vec<usize> = (0..7).collect();
        let shards = shard_sequences(&seqs, 2, 2).unwrap_or_default();
        assert_eq!(
            shards,
            vec![vec![vec![0, 1], vec![2, 3]], vec![vec![4, 5], vec![6]]]
        );
        assert_eq!(
            shard_sequences(&seqs, 4, 2),
            Err(ParallelError::TooFewSequences {
                sequences: 7,
                needed: 8
            })
        );
    }

    #[test]
    fn blocks_pad_to_a_multiple_of_cp() {
        assert_eq!(padded_len(16, 3), 18);
        assert_eq!(padded_len(16, 4), 16);
        let device = Default::default();
        let seq = 5;
        let distance: Vec<i64> = (0..seq * seq).map(|i| (i % 4) as i64).collect();
        let batch = TrainBatch::<B> {
            graph: GraphBatch {
                input: NodeInput::Ids(Tensor::from_data(
                    TensorData::new((1..=seq as i64).collect::<Vec<_>>(), [1, seq]),
                    &device,
                )),
                in_degree: Tensor::ones([1, seq], &device),
                out_degree: Tensor::ones([1, seq], &device),
                distance: Tensor::<B, 3, Int>::from_data(
                    TensorData::new(distance, [1, seq, seq]),
                    &device,
                )
                .into(),
                padding: Tensor::<B, 2, Int>::zeros([1, seq], &device).equal_elem(1),
                edge_paths: None,
                label_input: None,
            },
            labels: Tensor::ones([1, seq], &device),
            train_weight: Tensor::ones([1, seq], &device),
        };
        let last = BlockBatch::of(batch.clone(), 2, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(last.index_rows.dims(), [1, 3, 6]);
        let (BucketIndex::Dense(index_rows), BucketIndex::Dense(distance)) =
            (&last.index_rows, &batch.graph.distance)
        else {
            panic!("dense indexes");
        };
        // the block is a copy in the index's own dtype (a u8 index stays u8)
        assert_eq!(index_rows.dtype(), distance.dtype());
        let index_rows = index_rows.clone();
        let ids = match last.input {
            Some(NodeInput::Ids(ids)) => ids.into_data().iter::<i64>().collect(),
            _ => Vec::new(),
        };
        assert_eq!(ids, vec![4, 5, 0]);
        let padding: Vec<bool> = last.padding.into_data().iter::<bool>().collect();
        assert_eq!(padding, vec![false, false, true]);
        let weight: Vec<f32> = last.weight.into_data().iter::<f32>().collect();
        assert_eq!(weight, vec![1.0, 1.0, 0.0]);
        let row = index_rows
            .slice([0..1, 0..1, 0..6])
            .into_data()
            .iter::<i64>()
            .collect::<Vec<i64>>();
        // row 3 of the 5x5 index, then one padded column
        assert_eq!(row, vec![3, 0, 1, 2, 3, 0]);

        let mut bad = batch;
        bad.labels = Tensor::ones([1, seq + 1], &device);
        let err = BlockBatch::of(bad, 2, 0).err().unwrap_or_default();
        assert!(err.contains("labels"), "{err}");
    }
}

//! Graphormer's edge encoding: the mean over one shortest path of the edge features, projected
//! per hop and head, added to the attention logits.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Int, Tensor, backend::Backend};
use megagraph_kernels::AttentionError;

/// Configuration of an [`EdgeEncoding`].
#[derive(Config, Debug)]
pub struct EdgeEncodingConfig {
    /// Width of the edge features.
    pub edge_dim: usize,
    /// Number of attention heads.
    pub num_heads: usize,
    /// The longest path encoded (hops): one weight matrix per hop position.
    pub max_distance: u8,
}

/// The edge paths of a batch: per pair of positions the edges of one shortest path, as rows of
/// a feature matrix of the edges the batch uses (each edge once).
///
/// The pairs are those of some query rows (all `seq` of them on one device, a context block's
/// `rows` on a rank of a context-parallel ring, see [`block_rows`](Self::block_rows)) and every
/// key column.
#[derive(Clone, Debug)]
pub struct EdgePaths<B: Backend> {
    /// Features of the edges the batch's paths use, `[edges, edge_dim]`.
    pub features: Tensor<B, 2>,
    /// Per pair and hop the row of `features` of the hop's edge, `[batch, rows, seq,
    /// max_distance]`; `edges` (one past the last row) past a path's end and for pairs without a
    /// path.
    pub edge_ids: Tensor<B, 4, Int>,
    /// `1 / N` for a pair whose path has `N` hops, 0 for pairs without one (the diagonal, pairs
    /// beyond `max_distance`, unreachable ones and padding), `[batch, rows, seq]`.
    pub inverse_length: Tensor<B, 3>,
}

impl<B: Backend> EdgePaths<B> {
    /// The paths of the query rows `rows` of the sequences padded to `padded` positions: rows
    /// and columns past the sequence are pairs without a path. `edge_ids` becomes `[batch,
    /// rows.len(), padded, max_distance]` and `inverse_length` `[batch, rows.len(), padded]`,
    /// each in storage of its own (not a view of the whole); the features are kept whole.
    ///
    /// # Errors
    /// [`AttentionError::ShapeMismatch`] when the paths are not square (`[batch, seq, seq, ..]`),
    /// `padded < seq` or `rows` ends past `padded`.
    pub fn block_rows(self, rows: core::ops::Range<usize>, padded: usize) -> Result<Self, AttentionError> {
        let [batch, seq, columns, hops] = self.edge_ids.dims();
        let shape = self.edge_ids.dims().to_vec();
        check(&shape, 2, seq, "edge_paths.edge_ids", "seq")?;
        check(&self.inverse_length.dims(), 1, seq, "edge_paths.inverse_length", "seq")?;
        check(&self.inverse_length.dims(), 2, columns, "edge_paths.inverse_length", "seq")?;
        if padded < seq || rows.end > padded || rows.start > rows.end {
            return Err(AttentionError::ShapeMismatch {
                tensor: "edge_paths.edge_ids",
                dim: "seq",
                expected: padded,
                actual: seq,
                shape,
            });
        }
        let edges = self.features.dims()[0] as i64;
        let device = self.edge_ids.device();
        // the padding and the copies keep the tensors' own dtypes
        let (ids, lengths) = ((&device, self.edge_ids.dtype()), (&device, self.inverse_length.dtype()));
        let mut edge_ids = self.edge_ids;
        let mut inverse_length = self.inverse_length;
        if padded > seq {
            let extra = padded - seq;
            edge_ids = Tensor::cat(vec![edge_ids, Tensor::full([batch, seq, extra, hops], edges, ids)], 2);
            edge_ids = Tensor::cat(vec![edge_ids, Tensor::full([batch, extra, padded, hops], edges, ids)], 1);
            inverse_length = Tensor::cat(vec![inverse_length, Tensor::full([batch, seq, extra], 0.0, lengths)], 2);
            inverse_length = Tensor::cat(vec![inverse_length, Tensor::full([batch, extra, padded], 0.0, lengths)], 1);
        }
        let edge_ids = edge_ids.slice([0..batch, rows.clone(), 0..padded, 0..hops]);
        let inverse_length = inverse_length.slice([0..batch, rows, 0..padded]);
        Ok(Self {
            features: self.features,
            edge_ids: Tensor::from_data(edge_ids.into_data(), ids),
            inverse_length: Tensor::from_data(inverse_length.into_data(), lengths),
        })
    }
}

/// Graphormer's (multi-hop) edge encoding: for a pair `(i, j)` whose shortest path has edges
/// `e_1..e_N` (`1 <= N <= max_distance`), head `h` gets `c_ij[h] = (1/N) Σ_n x_{e_n} · w_n[:, h]`
/// with `x_e` the edge features and `w_n` the learned `[edge_dim, heads]` weight of hop `n`;
/// other pairs get 0.
///
/// Every edge of the batch is projected once for every hop position (`[edges, max_distance ·
/// heads]`), then each pair gathers its path's rows: the cost is one small matmul and a gather
/// of `batch · seq² · max_distance · heads` values. The result is a dense bias shared by every
/// layer, computed once per forward.
#[derive(Module, Debug)]
pub struct EdgeEncoding<B: Backend> {
    /// Per-hop weights, `[edge_dim, max_distance · num_heads]`: columns `n · heads..(n + 1) ·
    /// heads` are `w_{n+1}`.
    pub weight: Param<Tensor<B, 2>>,
    /// Number of attention heads.
    pub num_heads: usize,
}

impl EdgeEncodingConfig {
    /// Initializes an [`EdgeEncoding`] on `device`: weights from `N(0, 0.02²)`, as Graphormer's
    /// edge embeddings, so the bias starts near 0.
    pub fn init<B: Backend>(&self, device: &B::Device) -> EdgeEncoding<B> {
        let width = usize::from(self.max_distance) * self.num_heads;
        EdgeEncoding {
            weight: Initializer::Normal { mean: 0.0, std: 0.02 }.init([self.edge_dim, width], device),
            num_heads: self.num_heads,
        }
    }
}

impl<B: Backend> EdgeEncoding<B> {
    /// The longest path encoded (hops).
    pub fn max_distance(&self) -> usize {
        self.weight.dims()[1] / self.num_heads.max(1)
    }

    /// The bias of `paths`: `[batch, heads, rows, seq]` for paths of `rows` query rows (all `seq`
    /// of them on one device; a context block's on a rank of a ring, whose encoder then does
    /// `rows / seq` of the work).
    ///
    /// # Errors
    /// [`AttentionError::ShapeMismatch`] if the features are not `edge_dim` wide, the paths
    /// hold another number of hops than the encoding, or `inverse_length` is not `[batch, rows,
    /// seq]`.
    pub fn forward(&self, paths: &EdgePaths<B>) -> Result<Tensor<B, 4>, AttentionError> {
        let [edge_dim, width] = self.weight.dims();
        let (heads, hops) = (self.num_heads, self.max_distance());
        let [edges, _] = paths.features.dims();
        let [batch, rows, seq, _] = paths.edge_ids.dims();
        check(&paths.features.dims(), 1, edge_dim, "edge_paths.features", "edge_dim")?;
        check(&paths.edge_ids.dims(), 3, hops, "edge_paths.edge_ids", "max_distance")?;
        let lengths = paths.inverse_length.dims();
        check(&lengths, 0, batch, "edge_paths.inverse_length", "batch")?;
        check(&lengths, 1, rows, "edge_paths.inverse_length", "rows")?;
        check(&lengths, 2, seq, "edge_paths.inverse_length", "seq")?;
        let device = paths.features.device();
        // row `e · hops + n` of `projected` is edge e's projection for hop n; the extra edge
        // `edges` is the zero row that hops past a path's end read
        let projected = paths.features.clone().matmul(self.weight.val());
        let projected =
            Tensor::cat(vec![projected, Tensor::zeros([1, width], &device)], 0).reshape([(edges + 1) * hops, heads]);
        let hop = Tensor::<B, 1, Int>::arange(0..hops as i64, &device).reshape([1, 1, 1, hops]);
        let pairs = batch * rows * seq;
        let picked = (paths.edge_ids.clone() * hops as i64 + hop).reshape([pairs * hops]);
        let summed = projected
            .select(0, picked)
            .reshape([pairs, hops, heads])
            .sum_dim(1)
            .reshape([batch, rows, seq, heads]);
        let bias = summed * paths.inverse_length.clone().reshape([batch, rows, seq, 1]);
        // heads first, in storage of its own: every layer's attention reads this bias (and
        // writes its gradient) row by row, so one copy here saves a strided copy per layer and
        // pass (a permuted view is not contiguous, and the reshape of its merged batch and head
        // axes copies it)
        Ok(bias
            .permute([0, 3, 1, 2])
            .reshape([batch * heads, rows * seq])
            .reshape([batch, heads, rows, seq]))
    }
}

/// Checks that dimension `axis` of `shape` is `expected`.
fn check(
    shape: &[usize],
    axis: usize,
    expected: usize,
    tensor: &'static str,
    dim: &'static str,
) -> Result<(), AttentionError> {
    if shape[axis] == expected {
        return Ok(());
    }
    Err(AttentionError::ShapeMismatch {
        tensor,
        dim,
        expected,
        actual: shape[axis],
        shape: shape.to_vec(),
    })
}

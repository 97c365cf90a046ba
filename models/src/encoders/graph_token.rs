use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};
use megagraph_kernels::{AttentionError, BucketIndex};

/// Configuration of a [`GraphToken`].
#[derive(Config, Debug)]
pub struct GraphTokenConfig {
    /// Model width.
    pub d_model: usize,
    /// The row of the spatial table that every (token, node) and (node, token) pair reads: the
    /// token's learned "virtual distance", one scalar per head. It follows the distance buckets
    /// (`max_distance + 2` with the default layout).
    pub bucket: u8,
}

/// Graphormer's graph token: one extra position per sequence, a learned `d_model` embedding,
/// joined to every node. It attends to every node and every node attends to it; the pairs it
/// forms read their own row of the spatial table ([`GraphTokenConfig::bucket`]), so the
/// attention op sees one more position and nothing else changes. Its output is not a node: the
/// model drops it before the classifier.
///
/// The token sits at position 0 of the sequence the layers see: [`prepend`](Self::prepend)
/// widens the embeddings, [`index`](Self::index) the distance index and
/// [`key_mask`](Self::key_mask) the key mask (the token is never masked: it is never padding and
/// key dropout hides nodes only); [`strip`](Self::strip) drops it again.
#[derive(Module, Debug)]
pub struct GraphToken<B: Backend> {
    /// The token's embedding, `[1, d_model]` (Graphormer's `graph_token`).
    pub embedding: Param<Tensor<B, 2>>,
    /// The spatial-table row of the token's pairs (see [`GraphTokenConfig::bucket`]).
    pub bucket: u8,
}

impl GraphTokenConfig {
    /// Initializes a [`GraphToken`] on `device`: the embedding drawn from `N(0, 0.02²)` as
    /// Graphormer's.
    pub fn init<B: Backend>(&self, device: &B::Device) -> GraphToken<B> {
        GraphToken {
            embedding: Initializer::Normal { mean: 0.0, std: 0.02 }.init([1, self.d_model], device),
            bucket: self.bucket,
        }
    }
}

impl<B: Backend> GraphToken<B> {
    /// The token prepended to every sequence: `[batch, seq, d_model]` → `[batch, seq + 1,
    /// d_model]`.
    pub fn prepend(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, _, d_model] = x.dims();
        let token = self.embedding.val().reshape([1, 1, d_model]).repeat_dim(0, batch);
        Tensor::cat(vec![token, x], 1)
    }

    /// The token's output dropped: `[batch, seq + 1, d]` → `[batch, seq, d]`.
    pub fn strip(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, seq, d] = x.dims();
        x.slice([0..batch, 1..seq, 0..d])
    }

    /// The distance index of the nodes, `[batch, seq, seq]`, widened by the token's row and
    /// column, `[batch, seq + 1, seq + 1]`, which read [`bucket`](Self::bucket).
    ///
    /// # Errors
    /// As [`BucketIndex::with_graph_token`].
    pub fn index(&self, distance: BucketIndex<B>) -> Result<BucketIndex<B>, AttentionError> {
        distance.with_graph_token(self.bucket)
    }

    /// A dense bias of the nodes, `[batch, heads, seq, seq]` (the [edge
    /// encoding](crate::encoders::EdgeEncoding)'s), widened by the token's row and column, which
    /// read 0 (the token's pairs take their bias from [`bucket`](Self::bucket) only, as in
    /// Graphormer): `[batch, heads, seq + 1, seq + 1]`.
    pub fn widen_bias(&self, bias: Tensor<B, 4>) -> Tensor<B, 4> {
        let [batch, heads, seq, _] = bias.dims();
        let device = bias.device();
        let body = Tensor::cat(vec![Tensor::zeros([batch, heads, seq, 1], &device), bias], 3);
        Tensor::cat(vec![Tensor::zeros([batch, heads, 1, seq + 1], &device), body], 2)
    }

    /// The key mask of the nodes, `[batch, seq]` (`true` = not attended), with the token's key
    /// in front, never masked: `[batch, seq + 1]`.
    pub fn key_mask(&self, keys: Tensor<B, 2, Bool>) -> Tensor<B, 2, Bool> {
        let [batch, _] = keys.dims();
        let token = Tensor::<B, 2, Bool>::from_data(TensorData::new(vec![false; batch], [batch, 1]), &keys.device());
        Tensor::cat(vec![token, keys], 1)
    }
}

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};
use megagraph_kernels::{BucketIndex, DistanceBias};

/// Configuration of a [`SpatialEncoding`].
#[derive(Config, Debug)]
pub struct SpatialEncodingConfig {
    /// Number of distance buckets: `max_distance + 2` (exact distances `0..=max_distance`, and one
    /// bucket for "farther or unreachable").
    pub num_buckets: usize,
    /// Number of attention heads.
    pub num_heads: usize,
    /// Initial bias of bucket `d` is `-initial_decay * d`, so attention starts out favouring near
    /// nodes; `0.0` starts from a uniform bias as in Graphormer. Default: 2.0.
    #[config(default = 2.0)]
    pub initial_decay: f64,
    /// One more row after the distance buckets, row `num_buckets`: the [graph
    /// token](crate::encoders::GraphToken)'s virtual distance, initialized as one hop
    /// (`-initial_decay`), since the token is joined to every node. Default: false.
    #[config(default = false)]
    pub graph_token: bool,
}

/// Graphormer's spatial encoding: one learned scalar per (distance bucket, head) added to the
/// attention logits. It is shared by all layers and read through a `u8` distance index, so the
/// bias is never materialized as a `[batch, heads, seq, seq]` float tensor.
#[derive(Module, Debug)]
pub struct SpatialEncoding<B: Backend> {
    /// Bias table, `[num_buckets, num_heads]`.
    pub table: Param<Tensor<B, 2>>,
}

impl SpatialEncodingConfig {
    /// Initializes a [`SpatialEncoding`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> SpatialEncoding<B> {
        let hops = (0..self.num_buckets).chain(self.graph_token.then_some(1));
        let values: Vec<f32> = hops
            .clone()
            .flat_map(|hop| (0..self.num_heads).map(move |_| (-self.initial_decay * hop as f64) as f32))
            .collect();
        let table = Tensor::from_data(TensorData::new(values, [hops.count(), self.num_heads]), device);
        SpatialEncoding {
            table: Param::from_tensor(table),
        }
    }
}

impl<B: Backend> SpatialEncoding<B> {
    /// The attention bias of a batch: the distance index over `[batch, seq, seq]` (a dense
    /// `Tensor<B, 3, Int>` or a [`BucketIndex`]) read through the table.
    pub fn bias(&self, distance: impl Into<BucketIndex<B>>) -> DistanceBias<B> {
        DistanceBias {
            index: distance.into(),
            table: self.table.val(),
            column_offset: 0,
        }
    }

    /// Number of rows of the table: the distance buckets, and the graph token's when there is one.
    pub fn num_buckets(&self) -> usize {
        self.table.dims()[0]
    }
}

//! A distance index widened by Graphormer's graph token: one extra position 0, joined to every
//! node, whose row and column read a bucket of their own (the "virtual distance").

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::index::HostCsr;
use crate::{AttentionError, BucketIndex, CsrParts, SparseBucketIndex};

impl<B: Backend> BucketIndex<B> {
    /// The index with a graph token prepended as query row 0 and key column 0: the index of
    /// `[batch, q_len, total_k_len]` becomes `[batch, q_len + 1, total_k_len + 1]`, pair
    /// `(i + 1, j + 1)` is the old pair `(i, j)`, and every pair of row 0 or column 0 reads
    /// `bucket`.
    ///
    /// A dense index stays dense (on the device, in its dtype). A sparse index stays sparse:
    /// the token's row and column are stored pairs, so they read `bucket` and never the far
    /// bucket; it is read back to the host to be rebuilt.
    ///
    /// # Errors
    /// [`AttentionError::IndexData`] when the sparse index's far bucket is not a byte; as
    /// [`SparseBucketIndex::from_csr`].
    pub fn with_graph_token(self, bucket: u8) -> Result<Self, AttentionError> {
        match self {
            Self::Dense(index) => {
                let [batch, q_len, total_k_len] = index.dims();
                let (device, dtype) = (index.device(), index.dtype());
                let fill = |shape: [usize; 3]| Tensor::<B, 3, Int>::full(shape, i64::from(bucket), (&device, dtype));
                let body = Tensor::cat(vec![fill([batch, q_len, 1]), index], 2);
                Ok(Self::Dense(Tensor::cat(vec![fill([batch, 1, total_k_len + 1]), body], 1)))
            }
            Self::Sparse(index) => index.with_graph_token(bucket).map(Self::Sparse),
        }
    }
}

impl<B: Backend> SparseBucketIndex<B> {
    /// [`BucketIndex::with_graph_token`] of a sparse index.
    ///
    /// # Errors
    /// As [`BucketIndex::with_graph_token`].
    pub fn with_graph_token(&self, bucket: u8) -> Result<Self, AttentionError> {
        let far = u8::try_from(self.far_bucket)
            .map_err(|_| AttentionError::IndexData(format!("far bucket {} is not a byte", self.far_bucket)))?;
        let [batch, _] = self.row_offsets.dims();
        let device = self.columns.device();
        let csr = HostCsr::read(&self.clone().into_primitive());
        let width = self.total_k_len + 1;
        let mut row_offsets = vec![0u64];
        let (mut columns, mut buckets) = (Vec::new(), Vec::new());
        for b in 0..batch {
            // the token's row: every key, the token's own column included
            columns.extend(0..width as u32);
            buckets.extend(std::iter::repeat_n(bucket, width));
            row_offsets.push(columns.len() as u64);
            for i in 0..csr.q_len {
                let (row_columns, row_buckets) = csr.row(b, i, 0..self.total_k_len);
                columns.push(0);
                buckets.push(bucket);
                columns.extend(row_columns.iter().map(|&column| column + 1));
                buckets.extend_from_slice(row_buckets);
                row_offsets.push(columns.len() as u64);
            }
        }
        let parts = CsrParts {
            row_offsets: &row_offsets,
            columns: &columns,
            buckets: &buckets,
        };
        Self::from_csr(parts, [batch, csr.q_len + 1], width, far, &device)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    use super::*;

    type B = Flex;

    /// The dense buckets of `index`, row-major.
    fn dense_values(index: BucketIndex<B>) -> (Vec<i64>, [usize; 3]) {
        let dense = index.to_dense().unwrap_or_else(|e| panic!("{e}"));
        let dims = dense.dims();
        (dense.into_data().iter::<i64>().collect(), dims)
    }

    #[test]
    fn the_token_row_and_column_read_the_virtual_bucket_dense_and_sparse() {
        let device = Default::default();
        // a random 2 x 5 x 5 index of buckets 0..=3 with far bucket 3
        let values: Vec<u8> = (0..50u64)
            .map(|i| (i.wrapping_mul(2_654_435_761).rotate_left(7) % 4) as u8)
            .collect();
        let dense = crate::DistanceBias::<B>::index_from_u8(values.clone(), [2, 5, 5], &device)
            .unwrap_or_else(|e| panic!("{e}"));
        // the same index stored sparsely: the pairs below the far bucket
        let sparse = SparseBucketIndex::<B>::from_dense_buckets(&values, [2, 5, 5], 3, &device)
            .unwrap_or_else(|e| panic!("{e}"));
        let virtual_bucket = 4;
        let mut expected = Vec::new();
        for b in 0..2 {
            expected.extend(std::iter::repeat_n(virtual_bucket, 6));
            for i in 0..5 {
                expected.push(virtual_bucket);
                expected.extend(values[(b * 5 + i) * 5..][..5].iter().map(|&v| i64::from(v)));
            }
        }
        for index in [BucketIndex::Dense(dense), BucketIndex::Sparse(sparse)] {
            let widened = index.with_graph_token(virtual_bucket as u8).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(widened.dims(), [2, 6, 6]);
            let (got, dims) = dense_values(widened);
            assert_eq!(dims, [2, 6, 6]);
            assert_eq!(got, expected);
        }
        // an index of another int dtype keeps it
        let wide = Tensor::<B, 3, Int>::from_data(TensorData::new(vec![1i64; 4], [1, 2, 2]), &device);
        let (got, _) = dense_values(BucketIndex::Dense(wide).with_graph_token(7).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(got, vec![7, 7, 7, 7, 1, 1, 7, 1, 1]);
    }
}

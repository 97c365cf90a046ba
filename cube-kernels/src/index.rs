//! Distance indexes as the op reads them: every (query, key) pair's bucket, stored densely as
//! `[batch, q_len, total_k_len]` bytes, or sparsely with only the pairs within the maximum
//! distance (per query row the sorted key columns and their buckets, CSR) and one "farther"
//! bucket for every other pair.
//!
//! The dense layout costs one byte per pair; the sparse one about five bytes per stored pair and
//! nothing for the others, so it is the smaller one below about 20% fill
//! ([`sparse_is_smaller`]). Both give identical results.

use burn::tensor::backend::Backend;
use burn::tensor::ops::IntTensor;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_graph::SparseDistanceIndex;

use crate::bias::bytes_tensor;
use crate::{AttentionError, DistanceBias};

/// The bucket of every (query, key) pair of the op: dense or sparse.
#[derive(Clone, Debug)]
pub enum BucketIndex<B: Backend> {
    /// `[batch, q_len, total_k_len]` buckets.
    Dense(Tensor<B, 3, Int>),
    /// The pairs within the maximum distance, per query row; every other pair is
    /// [`SparseBucketIndex::far_bucket`].
    Sparse(SparseBucketIndex<B>),
}

impl<B: Backend> From<Tensor<B, 3, Int>> for BucketIndex<B> {
    fn from(index: Tensor<B, 3, Int>) -> Self {
        Self::Dense(index)
    }
}

impl<B: Backend> From<SparseBucketIndex<B>> for BucketIndex<B> {
    fn from(index: SparseBucketIndex<B>) -> Self {
        Self::Sparse(index)
    }
}

/// Whether a sparse index of `stored` pairs takes fewer bytes than a dense one of `pairs`
/// (offsets aside: 4 bytes of column and 1 of bucket per stored pair against 1 per pair): the
/// layout [`BucketIndex::from_row_blocks`] picks.
pub fn sparse_is_smaller(stored: usize, pairs: usize) -> bool {
    stored.saturating_mul(5) < pairs
}

impl<B: Backend> BucketIndex<B> {
    /// `[batch, q_len, total_k_len]`: the pairs the index covers.
    pub fn dims(&self) -> [usize; 3] {
        match self {
            Self::Dense(index) => index.dims(),
            Self::Sparse(index) => {
                let [batch, rows_plus_one] = index.row_offsets.dims();
                [batch, rows_plus_one.saturating_sub(1), index.total_k_len]
            }
        }
    }

    /// The index of query row blocks `blocks` (one per batch element, all of the same maximum
    /// distance) framed as `[batch, q_len, total_k_len]`: block `b`'s rows are the frame's first
    /// rows of batch element `b` and its columns the frame's first columns; every other pair
    /// (padding) is the far bucket. The layout is the smaller one for the fill: sparse when
    /// [`sparse_is_smaller`], dense otherwise.
    ///
    /// # Errors
    /// [`AttentionError::IndexData`] when there are no blocks, when they differ in maximum
    /// distance, or when a block has more rows than `q_len` or more columns than `total_k_len`;
    /// as [`SparseBucketIndex::from_csr`].
    pub fn from_row_blocks(
        blocks: &[&SparseDistanceIndex],
        frame: [usize; 2],
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        Self::from_row_blocks_where(blocks, frame, |_, _, _| true, device)
    }

    /// [`Self::from_row_blocks`] keeping only the stored pairs `(b, i, column)` (batch element,
    /// row of its block, column) for which `keep` holds; the others read as the far bucket.
    ///
    /// # Errors
    /// As [`Self::from_row_blocks`].
    pub fn from_row_blocks_where(
        blocks: &[&SparseDistanceIndex],
        [q_len, total_k_len]: [usize; 2],
        keep: impl Fn(usize, usize, u32) -> bool,
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        let far = check_frame(blocks, q_len, total_k_len)?;
        let mut row_offsets = Vec::with_capacity(blocks.len() * q_len + 1);
        let (mut columns, mut buckets) = (Vec::new(), Vec::new());
        row_offsets.push(0u64);
        for (b, index) in blocks.iter().enumerate() {
            for i in 0..q_len {
                if i < index.len() {
                    let (row_columns, row_buckets) = index.row(i);
                    for (&column, &bucket) in row_columns.iter().zip(row_buckets) {
                        if keep(b, i, column) {
                            columns.push(column);
                            buckets.push(bucket);
                        }
                    }
                }
                row_offsets.push(columns.len() as u64);
            }
        }
        let pairs = blocks.len() * q_len * total_k_len;
        if sparse_is_smaller(columns.len(), pairs) {
            let parts = CsrParts {
                row_offsets: &row_offsets,
                columns: &columns,
                buckets: &buckets,
            };
            return SparseBucketIndex::from_csr(
                parts,
                [blocks.len(), q_len],
                total_k_len,
                far,
                device,
            )
            .map(Self::Sparse);
        }
        let mut dense = vec![far; pairs];
        for (row, entries) in row_offsets.windows(2).enumerate() {
            let out = &mut dense[row * total_k_len..][..total_k_len];
            let entries = entries[0] as usize..entries[1] as usize;
            for (&column, &bucket) in columns[entries.clone()].iter().zip(&buckets[entries]) {
                out[column as usize] = bucket;
            }
        }
        DistanceBias::<B>::index_from_u8(dense, [blocks.len(), q_len, total_k_len], device)
            .map(Self::Dense)
    }

    /// The same index as a dense `[batch, q_len, total_k_len]` tensor (a sparse index is read
    /// back to the host and expanded).
    ///
    /// # Errors
    /// [`AttentionError::IndexData`] when a sparse index's far bucket is not a byte.
    pub fn to_dense(self) -> Result<Tensor<B, 3, Int>, AttentionError> {
        match self {
            Self::Dense(index) => Ok(index),
            Self::Sparse(index) => {
                let device = index.columns.device();
                let [batch, rows_plus_one] = index.row_offsets.dims();
                let (q_len, total_k_len) = (rows_plus_one.saturating_sub(1), index.total_k_len);
                if index.far_bucket > usize::from(u8::MAX) {
                    return Err(AttentionError::IndexData(format!(
                        "far bucket {} is not a byte",
                        index.far_bucket
                    )));
                }
                let csr = HostCsr::read(&index.into_primitive());
                let dense = csr.densify(batch, 0..total_k_len);
                DistanceBias::<B>::index_from_u8(dense, [batch, q_len, total_k_len], &device)
            }
        }
    }

    /// The bytes this index holds on its device (ints at their dtype's size).
    pub fn bytes(&self) -> usize {
        let bytes = |dtype: burn::tensor::DType, n: usize| dtype.size() * n;
        match self {
            Self::Dense(index) => bytes(index.dtype(), index.shape().num_elements()),
            Self::Sparse(index) => {
                bytes(index.row_offsets.dtype(), index.row_offsets.shape().num_elements())
                    + bytes(index.columns.dtype(), index.columns.shape().num_elements())
                    + bytes(index.buckets.dtype(), index.buckets.shape().num_elements())
            }
        }
    }

    /// The index at the primitive level.
    pub fn into_primitive(self) -> BucketIndexPrimitive<B> {
        match self {
            Self::Dense(index) => BucketIndexPrimitive::Dense(index.into_primitive()),
            Self::Sparse(index) => BucketIndexPrimitive::Sparse(index.into_primitive()),
        }
    }
}

/// A sparse distance index (CSR over the query rows of a batch).
///
/// The stored pairs of query row `i` of batch element `b` are the entries
/// `row_offsets[b, i]..row_offsets[b, i + 1]` of `columns` and `buckets`; offsets run over the
/// whole batch (batch element `b + 1` starts where `b` ends), so a batch range is a slice of
/// `row_offsets` alone. Columns are key positions `0..total_k_len`, ascending within a row.
/// Build it with [`SparseBucketIndex::from_csr`] or [`BucketIndex::from_row_blocks`], which
/// check all of this; the op relies on it.
#[derive(Clone, Debug)]
pub struct SparseBucketIndex<B: Backend> {
    /// `[batch, q_len + 1]` entry offsets.
    pub row_offsets: Tensor<B, 2, Int>,
    /// `[stored]` key columns.
    pub columns: Tensor<B, 1, Int>,
    /// `[stored]` buckets.
    pub buckets: Tensor<B, 1, Int>,
    /// Number of key columns the index spans.
    pub total_k_len: usize,
    /// The bucket of every pair not stored.
    pub far_bucket: usize,
}

/// Host copies of a sparse index, as [`SparseBucketIndex::from_csr`] takes them.
#[derive(Clone, Copy, Debug)]
pub struct CsrParts<'a> {
    /// `batch · q_len + 1` nondecreasing offsets, starting at 0 and ending at `columns.len()`.
    pub row_offsets: &'a [u64],
    /// Key columns, ascending within each row, below `total_k_len`.
    pub columns: &'a [u32],
    /// One bucket per column.
    pub buckets: &'a [u8],
}

impl<B: Backend> SparseBucketIndex<B> {
    /// Uploads a CSR index of `batch` elements of `q_len` query rows over `total_k_len` keys.
    ///
    /// # Errors
    /// [`AttentionError::IndexData`] naming the first inconsistency: offsets of the wrong count,
    /// not starting at 0, decreasing or not ending at the entry count; columns and buckets of
    /// different lengths; a column out of range or not ascending within its row; more entries
    /// than the device's int type can address.
    pub fn from_csr(
        parts: CsrParts<'_>,
        [batch, q_len]: [usize; 2],
        total_k_len: usize,
        far_bucket: u8,
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        let CsrParts {
            row_offsets,
            columns,
            buckets,
        } = parts;
        let bad = |what: String| Err(AttentionError::IndexData(what));
        if row_offsets.len() != batch * q_len + 1 {
            return bad(format!(
                "sparse row_offsets has {} entries, expected batch {batch} x q_len {q_len} + 1",
                row_offsets.len()
            ));
        }
        if columns.len() != buckets.len() {
            return bad(format!(
                "sparse index has {} columns but {} buckets",
                columns.len(),
                buckets.len()
            ));
        }
        if row_offsets[0] != 0 || row_offsets[row_offsets.len() - 1] != columns.len() as u64 {
            return bad(format!(
                "sparse row_offsets run from {} to {}, expected 0 to the entry count {}",
                row_offsets[0],
                row_offsets[row_offsets.len() - 1],
                columns.len()
            ));
        }
        if columns.len() > i32::MAX as usize {
            return bad(format!(
                "sparse index has {} entries, more than 32-bit offsets address",
                columns.len()
            ));
        }
        for (row, pair) in row_offsets.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return bad(format!(
                    "sparse row_offsets decrease at row {row}: {} then {}",
                    pair[0], pair[1]
                ));
            }
            let row_columns = &columns[pair[0] as usize..pair[1] as usize];
            for (n, &column) in row_columns.iter().enumerate() {
                if column as usize >= total_k_len {
                    return bad(format!(
                        "sparse row {row} has column {column}, not below total_k_len {total_k_len}"
                    ));
                }
                if n > 0 && row_columns[n - 1] >= column {
                    return bad(format!(
                        "sparse row {row}: columns {} then {column} are not ascending",
                        row_columns[n - 1]
                    ));
                }
            }
        }
        // row b of `[batch, q_len + 1]` holds the flat offsets of rows b·q_len ..= (b + 1)·q_len
        let offsets: Vec<i64> = (0..batch)
            .flat_map(|b| &row_offsets[b * q_len..=(b + 1) * q_len])
            .map(|&x| x as i64)
            .collect();
        let column_values: Vec<i64> = columns.iter().map(|&x| i64::from(x)).collect();
        let stored = buckets.len();
        Ok(Self {
            row_offsets: Tensor::from_data(TensorData::new(offsets, [batch, q_len + 1]), device),
            columns: Tensor::from_data(TensorData::new(column_values, [stored]), device),
            buckets: bytes_tensor(buckets.to_vec(), [stored], device)?,
            total_k_len,
            far_bucket: usize::from(far_bucket),
        })
    }

}

impl<B: Backend> SparseBucketIndex<B> {
    /// The sparse form of a dense row-major index of `[batch, q_len, total_k_len]` buckets:
    /// every pair that is not `far_bucket` stored.
    ///
    /// # Errors
    /// As [`Self::from_csr`] (a `buckets` of the wrong length among them).
    pub fn from_dense_buckets(
        buckets: &[u8],
        [batch, q_len, total_k_len]: [usize; 3],
        far_bucket: u8,
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        if buckets.len() != batch * q_len * total_k_len {
            return Err(AttentionError::IndexData(format!(
                "{} buckets for a dense index of [{batch}, {q_len}, {total_k_len}]",
                buckets.len()
            )));
        }
        let mut row_offsets = vec![0u64];
        let (mut columns, mut stored) = (Vec::new(), Vec::new());
        for row in buckets.chunks(total_k_len.max(1)) {
            for (column, &bucket) in row.iter().enumerate() {
                if bucket != far_bucket {
                    columns.push(column as u32);
                    stored.push(bucket);
                }
            }
            row_offsets.push(columns.len() as u64);
        }
        row_offsets.resize(batch * q_len + 1, columns.len() as u64);
        let parts = CsrParts {
            row_offsets: &row_offsets,
            columns: &columns,
            buckets: &stored,
        };
        Self::from_csr(parts, [batch, q_len], total_k_len, far_bucket, device)
    }

    /// The index at the primitive level.
    pub fn into_primitive(self) -> SparseBucketIndexPrimitive<B> {
        SparseBucketIndexPrimitive {
            row_offsets: self.row_offsets.into_primitive(),
            columns: self.columns.into_primitive(),
            buckets: self.buckets.into_primitive(),
            total_k_len: self.total_k_len,
            far_bucket: self.far_bucket,
        }
    }

    /// Query rows `rows` of every batch element, with `total_k_len` columns (at least the
    /// index's), in storage of their own: what one context-parallel rank keeps of a batch's
    /// index. Rows at or past the index's `q_len` are padding and store nothing. Reads the index
    /// back to the host.
    ///
    /// # Errors
    /// [`AttentionError::IndexData`] when `total_k_len` is below the index's; as
    /// [`Self::from_csr`].
    pub fn block_rows(
        &self,
        rows: std::ops::Range<usize>,
        total_k_len: usize,
    ) -> Result<Self, AttentionError> {
        if total_k_len < self.total_k_len {
            return Err(AttentionError::IndexData(format!(
                "cannot narrow a sparse index of {} columns to {total_k_len}",
                self.total_k_len
            )));
        }
        let [batch, _] = self.row_offsets.dims();
        let device = self.columns.device();
        let csr = HostCsr::read(&self.clone().into_primitive());
        let mut row_offsets = vec![0u64];
        let (mut columns, mut buckets) = (Vec::new(), Vec::new());
        for b in 0..batch {
            for i in rows.clone() {
                if i < csr.q_len {
                    let (c, k) = csr.row(b, i, 0..self.total_k_len);
                    columns.extend_from_slice(c);
                    buckets.extend_from_slice(k);
                }
                row_offsets.push(columns.len() as u64);
            }
        }
        let far = u8::try_from(self.far_bucket).map_err(|_| {
            AttentionError::IndexData(format!("far bucket {} is not a byte", self.far_bucket))
        })?;
        let parts = CsrParts {
            row_offsets: &row_offsets,
            columns: &columns,
            buckets: &buckets,
        };
        Self::from_csr(parts, [batch, rows.len()], total_k_len, far, &device)
    }
}

/// The far bucket of row blocks that fit a `[q_len, total_k_len]` frame.
fn check_frame(
    blocks: &[&SparseDistanceIndex],
    q_len: usize,
    total_k_len: usize,
) -> Result<u8, AttentionError> {
    let Some(first) = blocks.first() else {
        return Err(AttentionError::IndexData(
            "no distance index blocks to batch".to_string(),
        ));
    };
    for (b, index) in blocks.iter().enumerate() {
        if index.max_distance() != first.max_distance() {
            return Err(AttentionError::IndexData(format!(
                "distance index block {b} has max_distance {}, block 0 {}",
                index.max_distance(),
                first.max_distance()
            )));
        }
        if index.len() > q_len || index.seq_len() > total_k_len {
            return Err(AttentionError::IndexData(format!(
                "distance index block {b} has {} rows of {} columns, more than the frame's {q_len} x {total_k_len}",
                index.len(),
                index.seq_len()
            )));
        }
    }
    Ok(first.far_bucket())
}

/// [`BucketIndex`] at the primitive level.
#[derive(Clone, Debug)]
pub enum BucketIndexPrimitive<B: Backend> {
    /// `[batch, q_len, total_k_len]` int tensor of buckets.
    Dense(IntTensor<B>),
    /// See [`SparseBucketIndex`].
    Sparse(SparseBucketIndexPrimitive<B>),
}

impl<B: Backend> BucketIndexPrimitive<B> {
    /// The same index for a backend with the same int primitives (e.g. from
    /// `Autodiff<B>` to `B`, which does not track ints).
    pub fn cast<B2>(self) -> BucketIndexPrimitive<B2>
    where
        B2: Backend<IntTensorPrimitive = B::IntTensorPrimitive>,
    {
        match self {
            Self::Dense(index) => BucketIndexPrimitive::Dense(index),
            Self::Sparse(s) => BucketIndexPrimitive::Sparse(SparseBucketIndexPrimitive {
                row_offsets: s.row_offsets,
                columns: s.columns,
                buckets: s.buckets,
                total_k_len: s.total_k_len,
                far_bucket: s.far_bucket,
            }),
        }
    }
}

/// [`SparseBucketIndex`] at the primitive level.
#[derive(Clone, Debug)]
pub struct SparseBucketIndexPrimitive<B: Backend> {
    /// `[batch, q_len + 1]` entry offsets.
    pub row_offsets: IntTensor<B>,
    /// `[stored]` key columns.
    pub columns: IntTensor<B>,
    /// `[stored]` buckets.
    pub buckets: IntTensor<B>,
    /// Number of key columns the index spans.
    pub total_k_len: usize,
    /// The bucket of every pair not stored.
    pub far_bucket: usize,
}

/// A sparse index read back to host memory, for implementations that walk it on the CPU or
/// expand key tiles of it.
#[derive(Clone, Debug)]
pub(crate) struct HostCsr {
    /// `[batch, q_len + 1]` row-major.
    row_offsets: Vec<usize>,
    columns: Vec<u32>,
    buckets: Vec<u8>,
    /// Query rows per batch element.
    pub(crate) q_len: usize,
    /// The bucket of every pair not stored.
    pub(crate) far_bucket: usize,
}

impl HostCsr {
    /// Reads `index` from its device.
    pub(crate) fn read<B: Backend>(index: &SparseBucketIndexPrimitive<B>) -> Self {
        let ints = |t: &IntTensor<B>| -> Vec<i64> {
            Tensor::<B, 1, Int>::from_primitive(t.clone())
                .into_data()
                .iter::<i64>()
                .collect()
        };
        let offsets = Tensor::<B, 2, Int>::from_primitive(index.row_offsets.clone());
        let q_len = offsets.dims()[1].saturating_sub(1);
        Self {
            row_offsets: offsets
                .into_data()
                .iter::<i64>()
                .map(|x| x as usize)
                .collect(),
            columns: ints(&index.columns).into_iter().map(|x| x as u32).collect(),
            buckets: ints(&index.buckets).into_iter().map(|x| x as u8).collect(),
            q_len,
            far_bucket: index.far_bucket,
        }
    }

    /// The stored pairs of query row `i` of batch element `b` with a column in `columns`:
    /// (columns, buckets), ascending.
    #[inline]
    pub(crate) fn row(
        &self,
        b: usize,
        i: usize,
        columns: std::ops::Range<usize>,
    ) -> (&[u32], &[u8]) {
        let at = b * (self.q_len + 1) + i;
        let (start, end) = (self.row_offsets[at], self.row_offsets[at + 1]);
        let row = &self.columns[start..end];
        let first = row.partition_point(|&c| (c as usize) < columns.start);
        let last = first + row[first..].partition_point(|&c| (c as usize) < columns.end);
        (
            &row[first..last],
            &self.buckets[start + first..start + last],
        )
    }

    /// The largest stored bucket, if any.
    pub(crate) fn max_bucket(&self) -> Option<u8> {
        self.buckets.iter().copied().max()
    }

    /// The dense buckets `[batch, q_len, columns.len()]` of the key columns `columns`.
    pub(crate) fn densify(&self, batch: usize, columns: std::ops::Range<usize>) -> Vec<u8> {
        let width = columns.len();
        let mut out = vec![self.far_bucket as u8; batch * self.q_len * width];
        for b in 0..batch {
            for i in 0..self.q_len {
                let row = &mut out[(b * self.q_len + i) * width..][..width];
                let (cols, buckets) = self.row(b, i, columns.clone());
                for (&c, &bucket) in cols.iter().zip(buckets) {
                    row[c as usize - columns.start] = bucket;
                }
            }
        }
        out
    }
}

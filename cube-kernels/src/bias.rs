//! The additive attention biases: a distance-indexed table (Graphormer's spatial encoding), an
//! optional dense bias, and a key padding mask.

use burn::tensor::{Bool, DType, Int, Tensor, TensorData, backend::Backend};

use crate::{AttentionError, BucketIndex};

/// Spatial bias read through a distance index: `bias[b, h, i, j] = table[index[b, i, c0 + j], h]`
/// with `c0 = column_offset`.
///
/// The bias is never materialized as a `[batch, heads, q_len, k_len]` float tensor: the op reads
/// the index one key tile at a time.
#[derive(Clone, Debug)]
pub struct DistanceBias<B: Backend> {
    /// Distance bucket of every (query, key) pair over `[batch, q_len, total_k_len]`, values
    /// below `buckets`: dense (`u8` where the backend supports it, see
    /// [`DistanceBias::index_from_u8`]) or sparse. A dense tensor converts with `.into()`.
    pub index: BucketIndex<B>,
    /// Learned bias of every bucket and head: `[buckets, heads]`. Receives a gradient.
    pub table: Tensor<B, 2>,
    /// First index column of this key block: keys `0..k_len` read `index[.., .., column_offset + j]`.
    /// Lets the blocks of a split key range (ring/context parallelism) share one index.
    pub column_offset: usize,
}

impl<B: Backend> DistanceBias<B> {
    /// The dtype a distance index gets on `device`: `u8` when the backend supports it for int
    /// tensors, otherwise the device's default int dtype.
    pub fn index_dtype(device: &B::Device) -> DType {
        if B::supports_dtype(device, DType::U8) {
            DType::U8
        } else {
            burn::tensor::get_device_settings::<B>(device)
                .int_dtype
                .into()
        }
    }

    /// Builds a distance index tensor `[batch, q_len, total_k_len]` from row-major `u8` buckets,
    /// in the dtype given by [`DistanceBias::index_dtype`].
    ///
    /// # Errors
    ///
    /// [`AttentionError::IndexData`] if `values.len()` is not `batch * q_len * total_k_len`.
    pub fn index_from_u8(
        values: Vec<u8>,
        shape: [usize; 3],
        device: &B::Device,
    ) -> Result<Tensor<B, 3, Int>, AttentionError> {
        bytes_tensor(values, shape, device)
    }

    /// Checks that every index value is a row of the table (`0 <= value < buckets`).
    ///
    /// This reads the index back from the device (a synchronization), so the op does not call it;
    /// call it where inputs come from outside (data loading). Out-of-range buckets are not checked
    /// by the op itself and may panic or read garbage depending on the backend.
    ///
    /// # Errors
    ///
    /// [`AttentionError::BucketOutOfRange`] naming the offending value, or
    /// [`AttentionError::IndexData`] if the index cannot be read.
    pub fn check_bucket_range(&self) -> Result<(), AttentionError> {
        let buckets = self.table.dims()[0];
        let (values, far) = match &self.index {
            BucketIndex::Dense(index) => (index.clone().reshape([-1]), None),
            BucketIndex::Sparse(index) => (index.buckets.clone(), Some(index.far_bucket as i64)),
        };
        let mut extremes: Vec<i64> = far.into_iter().collect();
        if values.shape().num_elements() > 0 {
            let read = |t: Tensor<B, 1, Int>| -> Result<i64, AttentionError> {
                let data = t
                    .try_into_data()
                    .map_err(|err| AttentionError::IndexData(format!("{err:?}")))?;
                data.iter::<i64>()
                    .next()
                    .ok_or_else(|| AttentionError::IndexData("empty reduction".to_string()))
            };
            extremes.push(read(values.clone().max())?);
            extremes.push(read(values.min())?);
        }
        if let Some(&min) = extremes.iter().min()
            && min < 0
        {
            return Err(AttentionError::BucketOutOfRange {
                value: min,
                buckets,
            });
        }
        if let Some(&max) = extremes.iter().max()
            && max >= buckets as i64
        {
            return Err(AttentionError::BucketOutOfRange {
                value: max,
                buckets,
            });
        }
        Ok(())
    }
}

/// An int tensor of `shape` from row-major `u8` values, in the dtype given by
/// [`DistanceBias::index_dtype`].
///
/// # Errors
/// [`AttentionError::IndexData`] if `values.len()` is not the shape's element count.
pub(crate) fn bytes_tensor<B: Backend, const D: usize>(
    values: Vec<u8>,
    shape: [usize; D],
    device: &B::Device,
) -> Result<Tensor<B, D, Int>, AttentionError> {
    let expected = shape.iter().product::<usize>();
    if values.len() != expected {
        return Err(AttentionError::IndexData(format!(
            "{} values for shape {shape:?} ({expected} expected)",
            values.len()
        )));
    }
    let dtype = DistanceBias::<B>::index_dtype(device);
    let data = TensorData::new(values, shape);
    let data = if dtype == DType::U8 {
        data
    } else {
        data.convert_dtype(dtype)
    };
    Ok(Tensor::from_data(data, (device, dtype)))
}

/// All additive terms and masks of the attention logits. Every part is optional.
#[derive(Clone, Debug)]
pub struct AttentionBias<B: Backend> {
    /// Spatial bias through a distance index and a learned table.
    pub distance: Option<DistanceBias<B>>,
    /// Dense bias `[batch, heads, q_len, k_len]`. Receives a gradient.
    pub dense: Option<Tensor<B, 4>>,
    /// `[batch, k_len]`, `true` marks a padding key, masked out of every query's softmax.
    pub key_padding_mask: Option<Tensor<B, 2, Bool>>,
}

impl<B: Backend> Default for AttentionBias<B> {
    fn default() -> Self {
        Self {
            distance: None,
            dense: None,
            key_padding_mask: None,
        }
    }
}

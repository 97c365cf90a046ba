//! Errors of the graph attention op.

use burn::tensor::DType;
use thiserror::Error;

/// Why [`graph_attention`](crate::graph_attention) or
/// [`merge_partials`](crate::merge_partials) refused its inputs.
///
/// Every variant names the offending tensor (or option) and the values that disagree.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttentionError {
    /// A tensor dimension disagrees with the one implied by the other inputs.
    #[error(
        "graph attention input `{tensor}`: dimension `{dim}` is {actual}, expected {expected} (shape {shape:?})"
    )]
    ShapeMismatch {
        /// Name of the tensor, e.g. `"k"` or `"bias.distance.index"`.
        tensor: &'static str,
        /// Name of the dimension, e.g. `"head_dim"`.
        dim: &'static str,
        /// Size implied by the other inputs.
        expected: usize,
        /// Size found.
        actual: usize,
        /// Full shape of the offending tensor.
        shape: Vec<usize>,
    },
    /// The key block `[column_offset, column_offset + k_len)` does not fit in the distance index.
    #[error(
        "graph attention input `bias.distance.column_offset`: column_offset {column_offset} + k_len {k_len} exceeds the distance index's total key length {total_k_len}"
    )]
    ColumnOffsetOutOfRange {
        /// The requested column offset.
        column_offset: usize,
        /// Number of keys of this block.
        k_len: usize,
        /// Last dimension of the distance index.
        total_k_len: usize,
    },
    /// A distance index value is not a valid row of the bias table.
    #[error(
        "graph attention input `bias.distance.index`: value {value} is not below the table's bucket count {buckets}"
    )]
    BucketOutOfRange {
        /// Largest value found in the index.
        value: i64,
        /// Number of rows of the table.
        buckets: usize,
    },
    /// An edge of a [`SequenceEdges`](crate::SequenceEdges) names a position past its sequence.
    #[error(
        "sparse edge attention input `edges`: edge {edge} of batch element {batch} names position {position}, not below seq_len {seq_len}"
    )]
    EdgeOutOfRange {
        /// Batch element of the edge.
        batch: usize,
        /// Index of the edge in its batch element's list.
        edge: usize,
        /// The offending position.
        position: usize,
        /// Positions per sequence.
        seq_len: usize,
    },
    /// A float input's dtype differs from the queries' (q, k, v, the table and the dense bias
    /// must share one dtype: `f32`, `f16`, `bf16` or `f64`).
    #[error(
        "graph attention input `{tensor}`: dtype {actual:?}, expected {expected:?} (the dtype of `q`)"
    )]
    DTypeMismatch {
        /// Name of the tensor, e.g. `"k"` or `"bias.distance.table"`.
        tensor: &'static str,
        /// The dtype of `q`.
        expected: DType,
        /// The dtype found.
        actual: DType,
    },
    /// The key tile size is zero.
    #[error("graph attention option `block_size` must be positive, got 0")]
    ZeroBlockSize,
    /// The softmax scale is not a finite number.
    #[error("graph attention option `scale` must be finite, got {0}")]
    NonFiniteScale(f32),
    /// Some dimension that must be positive is zero.
    #[error(
        "graph attention input `{tensor}`: dimension `{dim}` must be positive (shape {shape:?})"
    )]
    EmptyDimension {
        /// Name of the tensor.
        tensor: &'static str,
        /// Name of the dimension.
        dim: &'static str,
        /// Full shape of the offending tensor.
        shape: Vec<usize>,
    },
    /// [`merge_partials`](crate::merge_partials) got no partial results.
    #[error("merge_partials: got no partial results to merge")]
    NoPartials,
    /// The distance index could not be built or read.
    #[error("graph attention distance index: {0}")]
    IndexData(String),
    /// An input the model needs is absent from the batch.
    #[error("graph attention input `{input}` is missing: {reason}")]
    MissingInput {
        /// Name of the input, e.g. `"edge_paths"`.
        input: &'static str,
        /// Why it is needed.
        reason: &'static str,
    },
}

/// Checks `actual` against `expected` (`(name, size)` per dimension).
pub(crate) fn check_dims(
    tensor: &'static str,
    actual: &[usize],
    expected: &[(&'static str, usize)],
) -> Result<(), AttentionError> {
    for (&size, &(dim, want)) in actual.iter().zip(expected) {
        if size != want {
            return Err(AttentionError::ShapeMismatch {
                tensor,
                dim,
                expected: want,
                actual: size,
                shape: actual.to_vec(),
            });
        }
    }
    Ok(())
}

//! Row reads and writes of the temporal state by node id, with "last occurrence wins" writes.

use burn::tensor::IndexingUpdateOp;
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use super::TemporalStateError;

/// The rows of `ids` that a write keeps: for each distinct id, the position of its **last**
/// occurrence in `ids`. Returns `(positions, ids)` in increasing position order.
///
/// Errors if an id is `>= num_nodes`.
pub(crate) fn last_occurrences(
    ids: &[usize],
    num_nodes: usize,
) -> Result<(Vec<usize>, Vec<usize>), TemporalStateError> {
    let mut last = vec![usize::MAX; num_nodes];
    for (position, &id) in ids.iter().enumerate() {
        let slot = last.get_mut(id).ok_or(TemporalStateError::NodeOutOfRange {
            field: "ids",
            position,
            id,
            num_nodes,
        })?;
        *slot = position;
    }
    let positions: Vec<usize> = ids
        .iter()
        .enumerate()
        .filter(|&(position, &id)| last[id] == position)
        .map(|(position, _)| position)
        .collect();
    let kept = positions.iter().map(|&p| ids[p]).collect();
    Ok((positions, kept))
}

/// Checks that every id is `< num_nodes`.
pub(crate) fn check_ids(ids: &[usize], num_nodes: usize) -> Result<(), TemporalStateError> {
    match ids.iter().position(|&id| id >= num_nodes) {
        Some(position) => Err(TemporalStateError::NodeOutOfRange {
            field: "ids",
            position,
            id: ids[position],
            num_nodes,
        }),
        None => Ok(()),
    }
}

/// `ids` as an index tensor on `device`.
pub(crate) fn index_tensor<B: Backend>(ids: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let ids: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
    let len = ids.len();
    Tensor::from_data(TensorData::new(ids, [len]), device)
}

/// Checks that `found` equals `expected`, naming `field` otherwise.
pub(crate) fn check_shape(
    field: &'static str,
    found: &[usize],
    expected: &[usize],
) -> Result<(), TemporalStateError> {
    if found == expected {
        Ok(())
    } else {
        Err(TemporalStateError::Shape {
            field,
            found: found.to_vec(),
            expected: expected.to_vec(),
        })
    }
}

/// `state` with rows `ids` (distinct, in range) replaced by the rows of `values` (dim 0):
/// one assigning scatter, so the work is that of the written rows, not of the whole state.
pub(crate) fn overwrite_rows<B: Backend, const D: usize>(
    state: Tensor<B, D>,
    ids: &[usize],
    values: Tensor<B, D>,
) -> Tensor<B, D> {
    if ids.is_empty() {
        return state;
    }
    let index = index_tensor::<B>(ids, &state.device()).reshape([ids.len(), 1]);
    state.scatter_nd::<2, D>(index, values, IndexingUpdateOp::Assign)
}

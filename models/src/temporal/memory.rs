//! Per-node memory: a state tensor, not a parameter (TGN, JODIE, APAN).

use burn::tensor::{Tensor, TensorData, backend::Backend};

use super::TemporalStateError;
use super::rows::{check_ids, check_shape, index_tensor, last_occurrences, overwrite_rows};

/// The memory of every node, `[num_nodes, dim_memory]`, and the time of its last update,
/// `[num_nodes]`. All zeros at the start of a stream and after [`reset`](Self::reset).
///
/// Not a module: the optimizer never sees it. The trainer writes the rows the model computed
/// after the optimizer step (TGL's deferred update) and saves it with
/// [`to_state`](Self::to_state). Writes are detached from any autodiff graph.
///
/// Times are `f32`: give them relative to the start of the stream so that differences keep
/// their resolution.
#[derive(Debug, Clone)]
pub struct NodeMemory<B: Backend> {
    memory: Tensor<B, 2>,
    last_update: Tensor<B, 1>,
}

/// A [`NodeMemory`] as plain data, for checkpoints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeMemoryState {
    /// Number of nodes.
    pub num_nodes: usize,
    /// Memory width.
    pub dim_memory: usize,
    /// Memory, row-major `[num_nodes, dim_memory]`.
    pub memory: Vec<f32>,
    /// Time of each node's last update, `[num_nodes]`.
    pub last_update: Vec<f32>,
}

impl<B: Backend> NodeMemory<B> {
    /// Zero memory for `num_nodes` nodes of width `dim_memory`.
    pub fn new(num_nodes: usize, dim_memory: usize, device: &B::Device) -> Self {
        Self {
            memory: Tensor::zeros([num_nodes, dim_memory], device),
            last_update: Tensor::zeros([num_nodes], device),
        }
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.last_update.dims()[0]
    }

    /// Memory width.
    pub fn dim_memory(&self) -> usize {
        self.memory.dims()[1]
    }

    /// The whole memory, `[num_nodes, dim_memory]`.
    pub fn memory(&self) -> &Tensor<B, 2> {
        &self.memory
    }

    /// The time of each node's last update, `[num_nodes]`.
    pub fn last_update(&self) -> &Tensor<B, 1> {
        &self.last_update
    }

    /// The rows of `ids` (repeats allowed): memory `[ids, dim_memory]` and last update `[ids]`.
    ///
    /// Errors if an id is out of range.
    pub fn gather(&self, ids: &[usize]) -> Result<(Tensor<B, 2>, Tensor<B, 1>), TemporalStateError> {
        check_ids(ids, self.num_nodes())?;
        let index = index_tensor::<B>(ids, &self.memory.device());
        Ok((self.memory.clone().select(0, index.clone()), self.last_update.clone().select(0, index)))
    }

    /// Writes `memory` (`[ids, dim_memory]`) and `time` (`[ids]`) to the rows of `ids`.
    ///
    /// When an id repeats, its **last occurrence wins**: order the rows by event time (TGL writes
    /// the memory of a node's last event in the batch). Errors, leaving the state unchanged, if
    /// an id is out of range or a shape disagrees.
    pub fn write(&mut self, ids: &[usize], memory: Tensor<B, 2>, time: Tensor<B, 1>) -> Result<(), TemporalStateError> {
        check_shape("memory", &memory.dims(), &[ids.len(), self.dim_memory()])?;
        check_shape("time", &time.dims(), &[ids.len()])?;
        let (positions, kept) = last_occurrences(ids, self.num_nodes())?;
        let device = self.memory.device();
        let index = index_tensor::<B>(&positions, &device);
        let memory = memory.detach().select(0, index.clone());
        let time = time.detach().select(0, index);
        self.memory = overwrite_rows(self.memory.clone(), &kept, memory);
        self.last_update = overwrite_rows(self.last_update.clone(), &kept, time);
        Ok(())
    }

    /// Zeros the memory and the update times (TGL resets them at the start of every epoch).
    pub fn reset(&mut self) {
        let device = self.memory.device();
        log::debug!("node memory reset: {} nodes", self.num_nodes());
        *self = Self::new(self.num_nodes(), self.dim_memory(), &device);
    }

    /// The state as plain data, for a checkpoint.
    pub fn to_state(&self) -> Result<NodeMemoryState, TemporalStateError> {
        Ok(NodeMemoryState {
            num_nodes: self.num_nodes(),
            dim_memory: self.dim_memory(),
            memory: floats("memory", self.memory.to_data())?,
            last_update: floats("last_update", self.last_update.to_data())?,
        })
    }

    /// The memory a checkpoint holds, on `device`. Errors if the buffers disagree with the
    /// declared sizes.
    pub fn from_state(state: &NodeMemoryState, device: &B::Device) -> Result<Self, TemporalStateError> {
        let (nodes, dim) = (state.num_nodes, state.dim_memory);
        check_shape("memory", &[state.memory.len()], &[nodes * dim])?;
        check_shape("last_update", &[state.last_update.len()], &[nodes])?;
        Ok(Self {
            memory: Tensor::from_data(TensorData::new(state.memory.clone(), [nodes, dim]), device),
            last_update: Tensor::from_data(TensorData::new(state.last_update.clone(), [nodes]), device),
        })
    }
}

/// The values of `data` as `f32`, or a [`TemporalStateError::Data`] naming `field`.
pub(crate) fn floats(field: &'static str, data: TensorData) -> Result<Vec<f32>, TemporalStateError> {
    data.convert::<f32>().into_vec::<f32>().map_err(|err| TemporalStateError::Data {
        field,
        element: "f32",
        reason: format!("{err:?}"),
    })
}

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
    pub fn gather(
        &self,
        ids: &[usize],
    ) -> Result<(Tensor<B, 2>, Tensor<B, 1>), TemporalStateError> {
        check_ids(ids, self.num_nodes())?;
        let index = index_tensor::<B>(ids, &self.memory.device());
        Ok((
            self.memory.clone().select(0, index.clone()),
            self.last_update.clone().select(0, index),
        ))
    }

    /// Writes `memory` (`[ids, dim_memory]`) and `time` (`[ids]`) to the rows of `ids`.
    ///
    /// When an id repeats, its **last occurrence wins**: order the rows by event time (TGL writes
    /// the memory of a node's last event in the batch). Errors, leaving the state unchanged, if
    /// an id is out of range or a shape disagrees.
    pub fn write(
        &mut self,
        ids: &[usize],
        memory: Tensor<B, 2>,
        time: Tensor<B, 1>,
    ) -> Result<(), TemporalStateError> {
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
    pub fn from_state(
        state: &NodeMemoryState,
        device: &B::Device,
    ) -> Result<Self, TemporalStateError> {
        let (nodes, dim) = (state.num_nodes, state.dim_memory);
        check_shape("memory", &[state.memory.len()], &[nodes * dim])?;
        check_shape("last_update", &[state.last_update.len()], &[nodes])?;
        Ok(Self {
            memory: Tensor::from_data(TensorData::new(state.memory.clone(), [nodes, dim]), device),
            last_update: Tensor::from_data(
                TensorData::new(state.last_update.clone(), [nodes]),
                device,
            ),
        })
    }
}

/// The values of `data` as `f32`, or a [`TemporalStateError::Data`] naming `field`.
pub(crate) fn floats(
    field: &'static str,
    data: TensorData,
) -> Result<Vec<f32>, TemporalStateError> {
    data.convert::<f32>()
        .into_vec::<f32>()
        .map_err(|err| TemporalStateError::Data {
            field,
            element: "f32",
            reason: format!("{err:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, read, tensor, widen};
    use burn::backend::Flex;

    #[test]
    fn writes_keep_the_last_occurrence_of_each_node() {
        let device = Default::default();
        let mut rng = Rng::new();
        let mut memory = NodeMemory::<Flex>::new(5, 3, &device);
        let ids = [3, 1, 3, 0, 1];
        let rows = rng.values(ids.len() * 3, -1.0, 1.0);
        let times = rng.values(ids.len(), 0.0, 100.0);
        memory
            .write(
                &ids,
                tensor(rows.clone(), [5, 3], &device),
                tensor(times.clone(), [5], &device),
            )
            .unwrap_or_else(|err| panic!("{err}"));
        // node 0 ← row 3, node 1 ← row 4, node 3 ← row 2; nodes 2 and 4 untouched
        let source = [Some(3), Some(4), None, Some(2), None];
        let (rows, times) = (widen(&rows), widen(&times));
        let want_memory: Vec<f64> = source
            .iter()
            .flat_map(|s| s.map_or(vec![0.0; 3], |r| rows[r * 3..r * 3 + 3].to_vec()))
            .collect();
        let want_time: Vec<f64> = source.iter().map(|s| s.map_or(0.0, |r| times[r])).collect();
        assert_eq!(
            read(memory.memory().clone()),
            want_memory,
            "seed {}",
            rng.seed
        );
        assert_eq!(
            read(memory.last_update().clone()),
            want_time,
            "seed {}",
            rng.seed
        );
        let (gathered, gathered_time) = memory
            .gather(&[3, 3, 2])
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            read(gathered),
            [&want_memory[9..12], &want_memory[9..12], &want_memory[6..9]].concat()
        );
        assert_eq!(
            read(gathered_time),
            vec![want_time[3], want_time[3], want_time[2]]
        );

        let state = memory.to_state().unwrap_or_else(|err| panic!("{err}"));
        let restored =
            NodeMemory::<Flex>::from_state(&state, &device).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(restored.to_state(), Ok(state));
        memory.reset();
        assert!(read(memory.memory().clone()).iter().all(|&v| v == 0.0));
    }

    #[test]
    fn bad_ids_and_shapes_are_errors_that_leave_the_state_unchanged() {
        let device = Default::default();
        let mut memory = NodeMemory::<Flex>::new(4, 2, &device);
        let write = |memory: &mut NodeMemory<Flex>, ids: &[usize], rows: usize| {
            memory.write(
                ids,
                Tensor::ones([rows, 2], &device),
                Tensor::ones([rows], &device),
            )
        };
        assert_eq!(
            write(&mut memory, &[1, 4], 2),
            Err(TemporalStateError::NodeOutOfRange {
                field: "ids",
                position: 1,
                id: 4,
                num_nodes: 4
            })
        );
        assert!(matches!(
            write(&mut memory, &[1, 2], 3),
            Err(TemporalStateError::Shape {
                field: "memory",
                ..
            })
        ));
        assert!(read(memory.memory().clone()).iter().all(|&v| v == 0.0));
        let mut state = memory.to_state().unwrap_or_else(|err| panic!("{err}"));
        state.last_update.pop();
        assert!(matches!(
            NodeMemory::<Flex>::from_state(&state, &device),
            Err(TemporalStateError::Shape {
                field: "last_update",
                ..
            })
        ));
    }
}

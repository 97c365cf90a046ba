//! [`MemoryStore`]: where the workers reconcile node memory, and [`NodeRows`], the rows they
//! exchange through it.
//!
//! Every worker keeps a replica of the whole node state (memory, update times, mailboxes) on
//! its device. At a synchronization point each worker publishes the rows of the nodes it wrote
//! since the last one, tagged with the stream index of the event that last wrote each; the
//! store keeps, per node, the row of the **latest event** (ties: the lowest worker), and every
//! worker copies the rows it did not win into its replica. After the exchange every replica
//! holds the same rows for every node written since the previous exchange.

use std::collections::HashMap;
use std::sync::Mutex;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use megagraph_models::temporal::TemporalStateError;

use super::barrier::Rendezvous;
use crate::error::{Result, TemporalTrainError};
use crate::state::NodeState;

/// Full state rows of some nodes: memory, update time and the whole mailbox of each.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeRows {
    /// The nodes, distinct.
    pub ids: Vec<usize>,
    /// The stream index of the event that last wrote each node.
    pub last_event: Vec<usize>,
    /// Memory, `[ids, dim_memory]`.
    pub memory: Vec<f32>,
    /// Last update times, `[ids]`.
    pub last_update: Vec<f32>,
    /// Mails, `[ids, mailbox_size, dim_mail]`.
    pub mails: Vec<f32>,
    /// Mail times, `[ids, mailbox_size]`.
    pub mail_time: Vec<f32>,
    /// Mails received per node.
    pub received: Vec<u64>,
}

impl NodeRows {
    /// The rows of `written` (node, last event) in `state`.
    pub fn read<B: Backend>(state: &NodeState<B>, written: &[(usize, usize)]) -> Result<Self> {
        let ids: Vec<usize> = written.iter().map(|&(node, _)| node).collect();
        let (memory, last_update) = state.memory.gather(&ids)?;
        let mails = state.mailbox.gather(&ids)?;
        let floats = |data: TensorData| {
            data.to_vec::<f32>().map_err(|err| TemporalStateError::Data {
                field: "node rows",
                element: "f32",
                reason: format!("{err:?}"),
            })
        };
        Ok(Self {
            last_event: written.iter().map(|&(_, event)| event).collect(),
            memory: floats(memory.into_data())?,
            last_update: floats(last_update.into_data())?,
            mails: floats(mails.mails.into_data())?,
            mail_time: floats(mails.time.into_data())?,
            received: ids.iter().map(|&id| state.mailbox.received()[id]).collect(),
            ids,
        })
    }

    /// Overwrites the rows of `self.ids` in `state`.
    pub fn write<B: Backend>(&self, state: &mut NodeState<B>, device: &B::Device) -> Result<()> {
        let n = self.ids.len();
        if n == 0 {
            return Ok(());
        }
        let (dim, size, dim_mail) = (
            state.memory.dim_memory(),
            state.mailbox.mailbox_size(),
            state.mailbox.dim_mail(),
        );
        let tensor = |values: &[f32], shape: Vec<usize>| TensorData::new(values.to_vec(), shape);
        state.memory.write(
            &self.ids,
            Tensor::from_data(tensor(&self.memory, vec![n, dim]), device),
            Tensor::from_data(tensor(&self.last_update, vec![n]), device),
        )?;
        state.mailbox.overwrite(
            &self.ids,
            Tensor::from_data(tensor(&self.mails, vec![n, size, dim_mail]), device),
            Tensor::from_data(tensor(&self.mail_time, vec![n, size]), device),
            &self.received,
        )?;
        Ok(())
    }

    /// Bytes of state these rows carry.
    pub fn bytes(&self) -> usize {
        4 * (self.memory.len() + self.last_update.len() + self.mails.len() + self.mail_time.len())
            + 8 * self.received.len()
    }

    /// The rows at `positions`.
    fn select(&self, positions: &[usize]) -> Self {
        let width = |values: &[f32]| values.len() / self.ids.len().max(1);
        let pick = |values: &[f32]| {
            let w = width(values);
            positions
                .iter()
                .flat_map(|&p| values[p * w..(p + 1) * w].iter().copied())
                .collect()
        };
        Self {
            ids: positions.iter().map(|&p| self.ids[p]).collect(),
            last_event: positions.iter().map(|&p| self.last_event[p]).collect(),
            memory: pick(&self.memory),
            last_update: pick(&self.last_update),
            mails: pick(&self.mails),
            mail_time: pick(&self.mail_time),
            received: positions.iter().map(|&p| self.received[p]).collect(),
        }
    }
}

/// For each node published by any worker, the worker whose row wins and its position there:
/// the row of the latest event, ties to the lowest worker ("the last occurrence is written").
pub(crate) fn winners(published: &[NodeRows]) -> HashMap<usize, (usize, usize)> {
    let mut best: HashMap<usize, (usize, usize, usize)> = HashMap::new();
    for (worker, rows) in published.iter().enumerate() {
        for (position, (&node, &event)) in rows.ids.iter().zip(&rows.last_event).enumerate() {
            let entry = best.entry(node).or_insert((event, worker, position));
            if event > entry.0 {
                *entry = (event, worker, position);
            }
        }
    }
    best.into_iter()
        .map(|(node, (_, worker, position))| (node, (worker, position)))
        .collect()
}

/// The exchange point of the workers' node rows (see the module docs).
#[derive(Debug)]
pub(crate) struct MemoryStore {
    published: Mutex<Vec<NodeRows>>,
    rendezvous: Rendezvous,
}

impl MemoryStore {
    /// A store for `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self {
            published: Mutex::new(vec![NodeRows::default(); workers]),
            rendezvous: Rendezvous::new(workers),
        }
    }

    /// Publishes `rows` as `worker`'s, waits for every worker's, and returns the rows other
    /// workers won that `worker` must copy into its replica.
    ///
    /// # Errors
    ///
    /// [`TemporalTrainError::Worker`] when another worker failed ([`abort`](Self::abort)).
    pub fn exchange(&self, worker: usize, rows: NodeRows) -> Result<Vec<NodeRows>> {
        let aborted = || TemporalTrainError::Worker {
            worker,
            message: "another worker failed during a memory exchange".into(),
        };
        self.lock()[worker] = rows;
        if !self.rendezvous.wait() {
            return Err(aborted());
        }
        let fetched = {
            let published = self.lock();
            let mut positions: Vec<Vec<usize>> = vec![Vec::new(); published.len()];
            for (winner, position) in winners(&published).into_values() {
                if winner != worker {
                    positions[winner].push(position);
                }
            }
            positions
                .into_iter()
                .enumerate()
                .filter(|(_, p)| !p.is_empty())
                .map(|(winner, mut p)| {
                    p.sort_unstable();
                    published[winner].select(&p)
                })
                .collect()
        };
        // nobody publishes the next round before everyone has read this one
        if !self.rendezvous.wait() {
            return Err(aborted());
        }
        Ok(fetched)
    }

    /// Releases every worker waiting in [`exchange`](Self::exchange) with an error.
    pub fn abort(&self) {
        self.rendezvous.abort();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<NodeRows>> {
        self.published.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use megagraph_models::temporal::{Mailbox, NodeMemory};

    fn rows(ids: &[usize], events: &[usize], value: f32) -> NodeRows {
        NodeRows {
            ids: ids.to_vec(),
            last_event: events.to_vec(),
            memory: ids.iter().flat_map(|&id| [value, id as f32]).collect(),
            last_update: events.iter().map(|&e| e as f32).collect(),
            mails: vec![value; ids.len() * 3],
            mail_time: vec![value; ids.len()],
            received: vec![value as u64; ids.len()],
        }
    }

    #[test]
    fn the_last_occurrence_of_a_node_is_written() {
        // node 5: worker 1's event 12 is later than worker 0's event 10; node 3: the same event
        // on both (epoch parallelism) goes to worker 0; node 7 only on worker 0
        let published = vec![rows(&[5, 3, 7], &[10, 4, 2], 1.0), rows(&[3, 5], &[4, 12], 2.0)];
        let won = winners(&published);
        assert_eq!(won[&5], (1, 1));
        assert_eq!(won[&3], (0, 1));
        assert_eq!(won[&7], (0, 2));
        let store = MemoryStore::new(2);
        let (first, second) = std::thread::scope(|scope| {
            let other = scope.spawn(|| store.exchange(1, published[1].clone()));
            let first = store.exchange(0, published[0].clone());
            (first, other.join().unwrap_or_else(|_| panic!("worker 1 panicked")))
        });
        let (first, second) = (
            first.unwrap_or_else(|e| panic!("{e}")),
            second.unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(first, vec![rows(&[5], &[12], 2.0)]);
        assert_eq!(second, vec![rows(&[3, 7], &[4, 2], 1.0)]);
    }

    #[test]
    fn rows_read_from_one_state_overwrite_another() {
        let device = Default::default();
        let mut source = NodeState::<Flex> {
            memory: NodeMemory::new(4, 2, &device),
            mailbox: Mailbox::new(4, 1, 3, &device),
        };
        rows(&[2, 0], &[9, 8], 3.0)
            .write(&mut source, &device)
            .unwrap_or_else(|e| panic!("{e}"));
        let read = NodeRows::read(&source, &[(0, 8), (2, 9)]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, rows(&[0, 2], &[8, 9], 3.0));
        assert_eq!(read.bytes(), 4 * (4 + 2 + 6 + 2) + 16);
        let mut target = NodeState::<Flex> {
            memory: NodeMemory::new(4, 2, &device),
            mailbox: Mailbox::new(4, 1, 3, &device),
        };
        read.write(&mut target, &device).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(target.to_data().ok(), source.to_data().ok());
    }
}

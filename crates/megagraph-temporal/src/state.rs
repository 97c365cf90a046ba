//! The node state of a memory model: [`NodeMemory`] and [`Mailbox`] together, as tensors on a
//! device or as plain data in a checkpoint file.

use std::io::{Read, Write};
use std::path::Path;

use burn::tensor::backend::Backend;
use megagraph_models::temporal::{Mailbox, MailboxState, NodeMemory, NodeMemoryState, TemporalModelConfig};

use crate::error::{Result, TemporalTrainError};

/// A memory model's node memory and mailboxes on one backend.
#[derive(Debug, Clone)]
pub struct NodeState<B: Backend> {
    /// Memory rows and their last update times.
    pub memory: NodeMemory<B>,
    /// Mailboxes.
    pub mailbox: Mailbox<B>,
}

/// [`NodeState`] as plain data: what a checkpoint keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStateData {
    /// The memory.
    pub memory: NodeMemoryState,
    /// The mailboxes.
    pub mailbox: MailboxState,
}

impl<B: Backend> NodeState<B> {
    /// Empty state for `num_nodes` nodes of a model configured by `config`, or `None` for a
    /// memoryless model.
    pub fn for_model(config: &TemporalModelConfig, num_nodes: usize, device: &B::Device) -> Option<Self> {
        config.memory_update.map(|_| Self {
            memory: NodeMemory::new(num_nodes, config.dim_memory, device),
            mailbox: Mailbox::new(num_nodes, config.mailbox_size, config.dim_mail(), device),
        })
    }

    /// Zeros the memory and empties the mailboxes (TGL does so at every epoch's start).
    pub fn reset(&mut self) {
        self.memory.reset();
        self.mailbox.reset();
    }

    /// The state as plain data.
    pub fn to_data(&self) -> Result<NodeStateData> {
        Ok(NodeStateData {
            memory: self.memory.to_state()?,
            mailbox: self.mailbox.to_state()?,
        })
    }

    /// The state `data` holds, on `device`.
    pub fn from_data(data: &NodeStateData, device: &B::Device) -> Result<Self> {
        Ok(Self {
            memory: NodeMemory::from_state(&data.memory, device)?,
            mailbox: Mailbox::from_state(&data.mailbox, device)?,
        })
    }

    /// The same state on another backend (training ↔ evaluation).
    pub fn to_backend<C: Backend>(&self, device: &C::Device) -> Result<NodeState<C>> {
        NodeState::from_data(&self.to_data()?, device)
    }
}

const MAGIC: &[u8; 8] = b"MGTSTAT1";

impl NodeStateData {
    /// Writes the state to `path` (little-endian sizes and values after a magic tag).
    pub fn write(&self, path: &Path) -> Result<()> {
        let io = |err: std::io::Error| checkpoint_error(path, err);
        let file = std::fs::File::create(path).map_err(io)?;
        let mut out = std::io::BufWriter::new(file);
        out.write_all(MAGIC).map_err(io)?;
        let (m, b) = (&self.memory, &self.mailbox);
        for size in [m.num_nodes, m.dim_memory, b.num_nodes, b.mailbox_size, b.dim_mail] {
            out.write_all(&(size as u64).to_le_bytes()).map_err(io)?;
        }
        for values in [&m.memory, &m.last_update, &b.mails, &b.mail_time] {
            for v in values.iter() {
                out.write_all(&v.to_le_bytes()).map_err(io)?;
            }
        }
        for v in &b.received {
            out.write_all(&v.to_le_bytes()).map_err(io)?;
        }
        out.into_inner()
            .map_err(|err| io(err.into_error()))?
            .sync_all()
            .map_err(io)
    }

    /// Reads a state [`write`](Self::write) wrote; a truncated or foreign file is an error
    /// naming `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .map_err(|err| checkpoint_error(path, err))?;
        let mut input = Input { bytes: &bytes, path };
        if input.take(MAGIC.len())? != MAGIC {
            return Err(checkpoint_error(path, "not a megagraph node-state file"));
        }
        let mut sizes = [0usize; 5];
        for size in &mut sizes {
            *size = usize::try_from(input.u64()?).map_err(|err| checkpoint_error(path, err))?;
        }
        let [nodes, dim_memory, mail_nodes, mailbox_size, dim_mail] = sizes;
        let memory = NodeMemoryState {
            num_nodes: nodes,
            dim_memory,
            memory: input.f32s(nodes.saturating_mul(dim_memory))?,
            last_update: input.f32s(nodes)?,
        };
        let slots = mail_nodes.saturating_mul(mailbox_size);
        let mailbox = MailboxState {
            num_nodes: mail_nodes,
            mailbox_size,
            dim_mail,
            mails: input.f32s(slots.saturating_mul(dim_mail))?,
            mail_time: input.f32s(slots)?,
            received: (0..mail_nodes).map(|_| input.u64()).collect::<Result<_>>()?,
        };
        if !input.bytes.is_empty() {
            return Err(checkpoint_error(path, "trailing bytes after the node state"));
        }
        Ok(Self { memory, mailbox })
    }
}

fn checkpoint_error(path: &Path, message: impl std::fmt::Display) -> TemporalTrainError {
    TemporalTrainError::Checkpoint {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A cursor over a state file's bytes.
struct Input<'a> {
    bytes: &'a [u8],
    path: &'a Path,
}

impl<'a> Input<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < len {
            return Err(checkpoint_error(self.path, "truncated node-state file"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn f32s(&mut self, len: usize) -> Result<Vec<f32>> {
        let bytes = self.take(len.checked_mul(4).ok_or_else(|| checkpoint_error(self.path, "size overflow"))?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|word| f32::from_le_bytes([word[0], word[1], word[2], word[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> NodeStateData {
        NodeStateData {
            memory: NodeMemoryState {
                num_nodes: 2,
                dim_memory: 3,
                memory: vec![0.5, -1.0, 2.0, 3.5, 1e-7, -0.0],
                last_update: vec![1.0, 2.0],
            },
            mailbox: MailboxState {
                num_nodes: 2,
                mailbox_size: 2,
                dim_mail: 1,
                mails: vec![1.0, 2.0, 3.0, 4.0],
                mail_time: vec![0.1, 0.2, 0.3, 0.4],
                received: vec![3, 1],
            },
        }
    }

    #[test]
    fn node_state_files_round_trip_and_reject_damage() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let path = dir.path().join("memory.bin");
        data().write(&path).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(NodeStateData::read(&path).unwrap_or_else(|err| panic!("{err}")), data());
        let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{err}"));
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap_or_else(|err| panic!("{err}"));
        let err = NodeStateData::read(&path).expect_err("a truncated file is refused");
        assert!(err.to_string().contains("truncated"), "{err}");
        std::fs::write(&path, b"something else entirely").unwrap_or_else(|err| panic!("{err}"));
        assert!(NodeStateData::read(&path).is_err());
    }
}

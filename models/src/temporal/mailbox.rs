//! Per-node mailbox: the last `mailbox_size` mails of each node, a state tensor (TGN, APAN).

use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::TemporalStateError;
use super::memory::floats;
use super::rows::{check_ids, check_shape, index_tensor, last_occurrences, overwrite_rows};

/// The mails of every node, `[num_nodes, mailbox_size, dim_mail]`, with their times
/// `[num_nodes, mailbox_size]`, and how many mails each node has received.
///
/// A mail is what an event tells its endpoint: TGN's `[mem_self, mem_other, edge_feat]`, built
/// by [`TemporalModel::memory_update`](super::TemporalModel::memory_update). Each node's slots
/// form a ring: a write goes to slot `received % mailbox_size`, overwriting the oldest mail once
/// the ring is full. Slots never written are reported as padding by [`gather`](Self::gather).
///
/// Not a module, like [`NodeMemory`](super::NodeMemory): writes are detached.
#[derive(Debug, Clone)]
pub struct Mailbox<B: Backend> {
    mails: Tensor<B, 3>,
    mail_time: Tensor<B, 2>,
    received: Vec<u64>,
}

/// The mails of some nodes, as [`Mailbox::gather`] reads them.
#[derive(Debug, Clone)]
pub struct MailRows<B: Backend> {
    /// Mails, `[rows, mailbox_size, dim_mail]`; zeros in padding slots.
    pub mails: Tensor<B, 3>,
    /// Their times, `[rows, mailbox_size]`; zero in padding slots.
    pub time: Tensor<B, 2>,
    /// `true` for slots that hold no mail yet, `[rows, mailbox_size]`.
    pub padding: Tensor<B, 2, Bool>,
}

/// A [`Mailbox`] as plain data, for checkpoints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MailboxState {
    /// Number of nodes.
    pub num_nodes: usize,
    /// Mails kept per node.
    pub mailbox_size: usize,
    /// Mail width.
    pub dim_mail: usize,
    /// Mails, row-major `[num_nodes, mailbox_size, dim_mail]`.
    pub mails: Vec<f32>,
    /// Mail times, `[num_nodes, mailbox_size]`.
    pub mail_time: Vec<f32>,
    /// Mails received per node since the last reset, `[num_nodes]`.
    pub received: Vec<u64>,
}

impl<B: Backend> Mailbox<B> {
    /// An empty mailbox for `num_nodes` nodes.
    pub fn new(num_nodes: usize, mailbox_size: usize, dim_mail: usize, device: &B::Device) -> Self {
        Self {
            mails: Tensor::zeros([num_nodes, mailbox_size, dim_mail], device),
            mail_time: Tensor::zeros([num_nodes, mailbox_size], device),
            received: vec![0; num_nodes],
        }
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.received.len()
    }

    /// Mails kept per node.
    pub fn mailbox_size(&self) -> usize {
        self.mails.dims()[1]
    }

    /// Mail width.
    pub fn dim_mail(&self) -> usize {
        self.mails.dims()[2]
    }

    /// Mails received per node since the last reset.
    pub fn received(&self) -> &[u64] {
        &self.received
    }

    /// The mailboxes of `ids` (repeats allowed). Errors if an id is out of range.
    pub fn gather(&self, ids: &[usize]) -> Result<MailRows<B>, TemporalStateError> {
        check_ids(ids, self.num_nodes())?;
        let device = self.mails.device();
        let size = self.mailbox_size();
        let index = index_tensor::<B>(ids, &device);
        let padding: Vec<bool> = ids
            .iter()
            .flat_map(|&id| (0..size).map(move |slot| (slot as u64) >= self.received[id]))
            .collect();
        Ok(MailRows {
            mails: self.mails.clone().select(0, index.clone()),
            time: self.mail_time.clone().select(0, index),
            padding: Tensor::from_data(TensorData::new(padding, [ids.len(), size]), &device),
        })
    }

    /// Delivers one mail per row: `mails` `[ids, dim_mail]` at `time` `[ids]` to the nodes `ids`.
    ///
    /// When an id repeats, only its **last occurrence** is delivered (TGL keeps the mail of a
    /// node's last event in the batch): order the rows by event time. Errors, leaving the state
    /// unchanged, if an id is out of range or a shape disagrees.
    pub fn write(
        &mut self,
        ids: &[usize],
        mails: Tensor<B, 2>,
        time: Tensor<B, 1>,
    ) -> Result<(), TemporalStateError> {
        let (nodes, size, dim) = (self.num_nodes(), self.mailbox_size(), self.dim_mail());
        check_shape("mails", &mails.dims(), &[ids.len(), dim])?;
        check_shape("time", &time.dims(), &[ids.len()])?;
        let (positions, kept) = last_occurrences(ids, nodes)?;
        let device = self.mails.device();
        let index = index_tensor::<B>(&positions, &device);
        let slots: Vec<usize> = kept
            .iter()
            .map(|&id| id * size + (self.received[id] % size as u64) as usize)
            .collect();
        let flat = self.mails.clone().reshape([nodes * size, dim]);
        let flat = overwrite_rows(flat, &slots, mails.detach().select(0, index.clone()));
        self.mails = flat.reshape([nodes, size, dim]);
        let flat_time = self.mail_time.clone().reshape([nodes * size]);
        let flat_time = overwrite_rows(flat_time, &slots, time.detach().select(0, index));
        self.mail_time = flat_time.reshape([nodes, size]);
        for id in kept {
            self.received[id] += 1;
        }
        Ok(())
    }

    /// Replaces the whole mailboxes of the distinct nodes `ids` with `mails`
    /// `[ids, mailbox_size, dim_mail]`, their times `[ids, mailbox_size]` and the mails
    /// `received` by each: copies rows another replica's [`gather`](Self::gather) and
    /// [`received`](Self::received) read. Errors, leaving the state unchanged, if an id is out
    /// of range or repeats, or a shape disagrees.
    pub fn overwrite(
        &mut self,
        ids: &[usize],
        mails: Tensor<B, 3>,
        time: Tensor<B, 2>,
        received: &[u64],
    ) -> Result<(), TemporalStateError> {
        let (size, dim) = (self.mailbox_size(), self.dim_mail());
        check_shape("mails", &mails.dims(), &[ids.len(), size, dim])?;
        check_shape("time", &time.dims(), &[ids.len(), size])?;
        check_shape("received", &[received.len()], &[ids.len()])?;
        let (positions, kept) = last_occurrences(ids, self.num_nodes())?;
        // a repeated node would keep fewer rows than given
        check_shape("distinct ids", &[kept.len()], &[ids.len()])?;
        let index = index_tensor::<B>(&positions, &self.mails.device());
        self.mails = overwrite_rows(self.mails.clone(), &kept, mails.detach().select(0, index.clone()));
        self.mail_time = overwrite_rows(self.mail_time.clone(), &kept, time.detach().select(0, index));
        for (&id, &position) in kept.iter().zip(&positions) {
            self.received[id] = received[position];
        }
        Ok(())
    }

    /// Empties every mailbox.
    pub fn reset(&mut self) {
        let device = self.mails.device();
        log::debug!("mailbox reset: {} nodes", self.num_nodes());
        *self = Self::new(
            self.num_nodes(),
            self.mailbox_size(),
            self.dim_mail(),
            &device,
        );
    }

    /// The state as plain data, for a checkpoint.
    pub fn to_state(&self) -> Result<MailboxState, TemporalStateError> {
        Ok(MailboxState {
            num_nodes: self.num_nodes(),
            mailbox_size: self.mailbox_size(),
            dim_mail: self.dim_mail(),
            mails: floats("mails", self.mails.to_data())?,
            mail_time: floats("mail_time", self.mail_time.to_data())?,
            received: self.received.clone(),
        })
    }

    /// The mailbox a checkpoint holds, on `device`. Errors if the buffers disagree with the
    /// declared sizes.
    pub fn from_state(
        state: &MailboxState,
        device: &B::Device,
    ) -> Result<Self, TemporalStateError> {
        let (nodes, size, dim) = (state.num_nodes, state.mailbox_size, state.dim_mail);
        check_shape("mails", &[state.mails.len()], &[nodes * size * dim])?;
        check_shape("mail_time", &[state.mail_time.len()], &[nodes * size])?;
        check_shape("received", &[state.received.len()], &[nodes])?;
        Ok(Self {
            mails: Tensor::from_data(
                TensorData::new(state.mails.clone(), [nodes, size, dim]),
                device,
            ),
            mail_time: Tensor::from_data(
                TensorData::new(state.mail_time.clone(), [nodes, size]),
                device,
            ),
            received: state.received.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, read, tensor, widen};
    use burn::backend::Flex;

    fn bools<B: Backend>(t: Tensor<B, 2, Bool>) -> Vec<bool> {
        t.into_data().iter::<bool>().collect()
    }

    #[test]
    fn mails_fill_a_ring_per_node_and_the_last_occurrence_wins() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (size, dim) = (2, 3);
        let mut mailbox = Mailbox::<Flex>::new(3, size, dim, &device);
        let mut deliver = |mailbox: &mut Mailbox<Flex>, ids: &[usize]| {
            let mails = rng.values(ids.len() * dim, -1.0, 1.0);
            let times = rng.values(ids.len(), 0.0, 10.0);
            mailbox
                .write(
                    ids,
                    tensor(mails.clone(), [ids.len(), dim], &device),
                    tensor(times.clone(), [ids.len()], &device),
                )
                .unwrap_or_else(|err| panic!("{err}"));
            (widen(&mails), widen(&times))
        };
        // node 0 keeps only its second mail of the batch (row 2)
        let (first, first_time) = deliver(&mut mailbox, &[0, 2, 0]);
        assert_eq!(mailbox.received(), &[1, 0, 1]);
        let rows = mailbox
            .gather(&[0, 1, 2])
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            bools(rows.padding),
            vec![false, true, true, true, false, true]
        );
        let zeros = vec![0.0; dim];
        let want = [&first[6..9], &zeros, &zeros, &zeros, &first[3..6], &zeros].concat();
        assert_eq!(read(rows.mails), want);
        assert_eq!(
            read(rows.time),
            vec![first_time[2], 0.0, 0.0, 0.0, first_time[1], 0.0]
        );

        // two more mails to node 0: slot 1, then slot 0 again (the ring wraps)
        let (second, _) = deliver(&mut mailbox, &[0]);
        let (third, third_time) = deliver(&mut mailbox, &[0]);
        let rows = mailbox.gather(&[0]).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(bools(rows.padding), vec![false, false]);
        assert_eq!(
            read(rows.mails),
            [third.as_slice(), second.as_slice()].concat()
        );
        assert_eq!(read(rows.time)[0], third_time[0]);

        let state = mailbox.to_state().unwrap_or_else(|err| panic!("{err}"));
        let restored =
            Mailbox::<Flex>::from_state(&state, &device).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(restored.to_state(), Ok(state));
        assert!(matches!(
            mailbox.gather(&[3]),
            Err(TemporalStateError::NodeOutOfRange { id: 3, .. })
        ));
        mailbox.reset();
        assert_eq!(mailbox.received(), &[0, 0, 0]);
    }
}

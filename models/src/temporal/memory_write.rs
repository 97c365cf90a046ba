//! The deferred state update of one batch (TGL's `update_memory` and `update_mailbox`).

use burn::tensor::{Tensor, backend::Backend};

use super::rows::{check_ids, check_shape};
use super::{Mailbox, NodeMemory, TemporalStateError};

/// Memory rows and mails of a batch's events, interleaved by event: row `2i` belongs to the
/// source of event `i`, row `2i + 1` to its destination.
///
/// Interleaving keeps the rows in event order, so when a node occurs in several events the
/// state keeps the write of its latest one ("last occurrence wins").
#[derive(Debug, Clone)]
pub struct MemoryWrite<B: Backend> {
    /// Updated memory, `[2 · events, dim_memory]`.
    pub memory: Tensor<B, 2>,
    /// Mails, `[2 · events, dim_mail]`.
    pub mails: Tensor<B, 2>,
    /// The events' times, `[2 · events]`: the memory's update time and the mails' time.
    pub time: Tensor<B, 1>,
}

impl<B: Backend> MemoryWrite<B> {
    /// The write of events whose endpoints have the updated memory `src`, `dst`
    /// (`[events, dim_memory]`), at `time` `[events]`, with edge features `[events, dim_edge]`.
    pub fn new(
        src: Tensor<B, 2>,
        dst: Tensor<B, 2>,
        time: Tensor<B, 1>,
        edge_feat: Option<Tensor<B, 2>>,
    ) -> Self {
        let events = src.dims()[0];
        let interleave = |a: Tensor<B, 2>, b: Tensor<B, 2>| {
            let width = a.dims()[1];
            Tensor::stack::<3>(vec![a, b], 1).reshape([2 * events, width])
        };
        let mail = |own: &Tensor<B, 2>, other: &Tensor<B, 2>| {
            let mut parts = vec![own.clone(), other.clone()];
            parts.extend(edge_feat.clone());
            Tensor::cat(parts, 1)
        };
        let mails = interleave(mail(&src, &dst), mail(&dst, &src));
        let time = Tensor::stack::<2>(vec![time.clone(), time], 1).reshape([2 * events]);
        let memory = interleave(src, dst);
        Self {
            memory,
            mails,
            time,
        }
    }

    /// Writes the memory rows to `memory` and delivers the mails to `mailbox`, for events with
    /// endpoints `src` and `dst` (`[events]` each, in the order the write was built from).
    ///
    /// Errors, before any write, if the id lists disagree with the write's events or an id is
    /// out of range.
    pub fn apply(
        self,
        src: &[usize],
        dst: &[usize],
        memory: &mut NodeMemory<B>,
        mailbox: &mut Mailbox<B>,
    ) -> Result<(), TemporalStateError> {
        let events = self.time.dims()[0] / 2;
        check_shape("src", &[src.len()], &[events])?;
        check_shape("dst", &[dst.len()], &[events])?;
        let ids: Vec<usize> = src.iter().zip(dst).flat_map(|(&s, &d)| [s, d]).collect();
        check_ids(&ids, memory.num_nodes().min(mailbox.num_nodes()))?;
        check_shape(
            "memory",
            &self.memory.dims(),
            &[2 * events, memory.dim_memory()],
        )?;
        check_shape(
            "mails",
            &self.mails.dims(),
            &[2 * events, mailbox.dim_mail()],
        )?;
        memory.write(&ids, self.memory, self.time.clone())?;
        mailbox.write(&ids, self.mails, self.time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, read, tensor, widen};
    use burn::backend::Flex;

    #[test]
    fn mails_carry_both_memories_and_the_latest_event_of_a_node_wins() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (dim_memory, dim_edge) = (2, 1);
        let (src, s) = rng.tensor::<Flex, 2>([2, dim_memory], &device);
        let (dst, d) = rng.tensor::<Flex, 2>([2, dim_memory], &device);
        let (edge, e) = rng.tensor::<Flex, 2>([2, dim_edge], &device);
        let times = rng.values(2, 0.0, 10.0);
        let write = MemoryWrite::new(src, dst, tensor(times.clone(), [2], &device), Some(edge));
        // event 0: 4 → 1; event 1: 2 → 4, so node 4 keeps event 1's (destination) write
        let (mut memory, mut mailbox) = (
            NodeMemory::<Flex>::new(5, dim_memory, &device),
            Mailbox::<Flex>::new(5, 1, 5, &device),
        );
        write
            .apply(&[4, 2], &[1, 4], &mut memory, &mut mailbox)
            .unwrap_or_else(|err| panic!("{err}"));
        let row = |x: &[f64], i: usize, w: usize| x[i * w..(i + 1) * w].to_vec();
        let mail = |own: &[f64], other: &[f64], i: usize| {
            [row(own, i, 2), row(other, i, 2), row(&e, i, 1)].concat()
        };
        let rows = mailbox
            .gather(&[1, 2, 4])
            .unwrap_or_else(|err| panic!("{err}"));
        let want = [mail(&d, &s, 0), mail(&s, &d, 1), mail(&d, &s, 1)].concat();
        assert_eq!(read(rows.mails), want, "seed {}", rng.seed);
        let (kept, kept_time) = memory
            .gather(&[1, 2, 4])
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            read(kept),
            [row(&d, 0, 2), row(&s, 1, 2), row(&d, 1, 2)].concat()
        );
        let times = widen(&times);
        assert_eq!(read(kept_time), vec![times[0], times[1], times[1]]);
        assert_eq!(mailbox.received(), &[0, 1, 1, 0, 1]);
    }
}

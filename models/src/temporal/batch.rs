//! The tensor-level input of a [`TemporalModel`](super::TemporalModel) for one batch of events.

use burn::tensor::{Int, Tensor, backend::Backend};

use super::{
    MailRows, Mailbox, NeighbourHop, NodeMemory, SnapshotNeighbourhood, TemporalStateError,
};

/// The memory state of some node rows, as [`NodeMemory`] and [`Mailbox`] hold it before the
/// batch (the memory updaters turn it into the rows' current memory).
#[derive(Debug, Clone)]
pub struct MemoryRows<B: Backend> {
    /// Memory, `[rows, dim_memory]`.
    pub memory: Tensor<B, 2>,
    /// Time of each row's last memory update, `[rows]`.
    pub last_update: Tensor<B, 1>,
    /// Each row's mailbox.
    pub mail: MailRows<B>,
}

impl<B: Backend> MemoryRows<B> {
    /// The rows of `ids` (repeats allowed) of `memory` and `mailbox`. Errors if an id is out of
    /// range.
    pub fn gather(
        memory: &NodeMemory<B>,
        mailbox: &Mailbox<B>,
        ids: &[usize],
    ) -> Result<Self, TemporalStateError> {
        let (rows, last_update) = memory.gather(ids)?;
        Ok(Self {
            memory: rows,
            last_update,
            mail: mailbox.gather(ids)?,
        })
    }
}

/// The inputs of one level of node rows.
#[derive(Debug, Clone)]
pub struct NodeRows<B: Backend> {
    /// The time each row is read at, `[rows]`: its event's time for a root, its root's event
    /// time for a sampled neighbour.
    pub time: Tensor<B, 1>,
    /// Node features, `[rows, dim_node]`; `None` when the model has `dim_node = 0`.
    pub features: Option<Tensor<B, 2>>,
    /// Memory state of the rows; required by models with memory, ignored by the others.
    pub memory: Option<MemoryRows<B>>,
    /// When set, `time`, `features` and `memory` hold the level's **distinct** rows, and this
    /// index names for each row of the level the distinct row it repeats (`[rows]`). The model
    /// then computes each distinct row's representation once and gathers it (a node read at
    /// the same time by several roots, or sampled twice as one root's neighbour, is one row):
    /// the same values as the rows written out in full, at the cost of the distinct rows (a
    /// dropout inside the memory updater, APAN's, draws one mask per stored row for all its
    /// repeats). `None`: one stored row per row of the level.
    pub expand: Option<Tensor<B, 1, Int>>,
}

impl<B: Backend> NodeRows<B> {
    /// Number of rows of the level (the length of [`expand`](Self::expand) when set).
    pub fn len(&self) -> usize {
        match &self.expand {
            Some(index) => index.dims()[0],
            None => self.time.dims()[0],
        }
    }

    /// Whether the level has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `tensor`, one row per stored row, as one row per row of the level: gathered through
    /// [`expand`](Self::expand) when set, else unchanged.
    pub fn expanded<const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        match &self.expand {
            Some(index) => tensor.select(0, index.clone()),
            None => tensor,
        }
    }

    /// The rows `index` (`[n]`, repeats allowed) of the stored rows, written out in full: time,
    /// features and memory state gathered, `expand` cleared. On rows with `expand` set,
    /// `rows.select(expand)` is the level they stand for.
    pub fn select(self, index: Tensor<B, 1, Int>) -> Self {
        Self {
            time: self.time.select(0, index.clone()),
            features: self.features.map(|f| f.select(0, index.clone())),
            memory: self.memory.map(|m| MemoryRows {
                memory: m.memory.select(0, index.clone()),
                last_update: m.last_update.select(0, index.clone()),
                mail: MailRows {
                    mails: m.mail.mails.select(0, index.clone()),
                    time: m.mail.time.select(0, index.clone()),
                    padding: m.mail.padding.select(0, index.clone()),
                },
            }),
            expand: None,
        }
    }
}

/// One batch of `events` positive events with `num_negatives` sampled negative destinations
/// each, as the model reads it.
///
/// The roots (level 0) are ordered `[src (events) ; pos_dst (events) ; neg_dst (events ·
/// num_negatives, event-major)]`, so `levels[0]` has `events · (2 + num_negatives)` rows.
#[derive(Debug, Clone)]
pub struct TemporalBatch<B: Backend> {
    /// Negative destinations per event.
    pub num_negatives: usize,
    /// Node rows by level: the roots, then (graph attention only) their sampled neighbours
    /// level by level, laid out as [`TemporalNeighbourhood`](super::TemporalNeighbourhood).
    pub levels: Vec<NodeRows<B>>,
    /// Edges from level `l` to level `l + 1` (graph attention only; `layers` hops).
    pub hops: Vec<NeighbourHop<B>>,
    /// The roots' snapshot neighbourhoods (DySAT only), built from node features.
    pub snapshots: Option<SnapshotNeighbourhood<B>>,
}

impl<B: Backend> TemporalBatch<B> {
    /// Number of positive events: the root count over `2 + num_negatives`.
    pub fn num_events(&self) -> usize {
        self.levels
            .first()
            .map_or(0, |roots| roots.len() / (2 + self.num_negatives))
    }
}

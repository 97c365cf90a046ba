//! The memory updater a [`TemporalModel`](super::TemporalModel) uses (TGL's `memory_update`).

use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};

use super::{CellInput, GruMemoryUpdater, MemoryRows, RnnMemoryUpdater, TransformerMemoryUpdater};

/// Which memory updater a model uses (TGL's `memory_update`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryUpdateKind {
    /// A GRU cell over the last mail (TGN).
    Gru,
    /// A vanilla RNN cell over the last mail (JODIE).
    Rnn,
    /// Attention of the memory over the mailbox (APAN).
    Transformer,
}

/// One of the memory updaters.
// one per model, never in a collection: boxing the larger variant would buy nothing
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum MemoryUpdater<B: Backend> {
    /// TGN's.
    Gru(GruMemoryUpdater<B>),
    /// JODIE's.
    Rnn(RnnMemoryUpdater<B>),
    /// APAN's.
    Transformer(TransformerMemoryUpdater<B>),
}

impl<B: Backend> MemoryUpdater<B> {
    /// The rows' current memory, `[rows, dim_memory]`, from their state and the time `[rows]`
    /// they are read at. The cell updaters read slot 0 of a mailbox of size 1 (TGL runs them on
    /// every row, with a zero mail before the first).
    pub fn forward(&self, rows: MemoryRows<B>, time: Tensor<B, 1>) -> Tensor<B, 2> {
        let cell_input = |rows: MemoryRows<B>| {
            let [n, _, dim_mail] = rows.mail.mails.dims();
            CellInput {
                memory: rows.memory,
                mail: rows.mail.mails.narrow(1, 0, 1).reshape([n, dim_mail]),
                delta_t: time.clone() - rows.last_update,
            }
        };
        match self {
            MemoryUpdater::Gru(gru) => gru.forward(cell_input(rows)),
            MemoryUpdater::Rnn(rnn) => rnn.forward(cell_input(rows)),
            MemoryUpdater::Transformer(transformer) => {
                transformer.forward(rows.memory, rows.mail, time)
            }
        }
    }
}

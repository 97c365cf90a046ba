//! [`CpMode`]: how a context-parallel group attends over the whole sequence.

use serde::{Deserialize, Serialize};

/// How the `cp` ranks of a context group attend over the whole sequence (`ring` or `ulysses`
/// in config files, `--cp-mode` on the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpMode {
    /// Graph-aware ring attention ([`ring_attention`](crate::ring_attention)): key/value blocks
    /// travel the ring; each rank holds the distance index rows of its own block (the default).
    #[default]
    Ring,
    /// Ulysses ([`ulysses_attention`](crate::ulysses_attention)): two all-to-alls per
    /// attention scatter the heads and gather the sequence; each rank holds the index of every
    /// row, and `heads` must be a multiple of `cp`.
    Ulysses,
}

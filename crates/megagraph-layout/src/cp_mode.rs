//! [`CpMode`]: how a context-parallel group attends over the whole sequence.

use serde::{Deserialize, Serialize};

/// How the `cp` ranks of a context group attend over the whole sequence (`ring` or `ulysses`
/// in config files, `--cp-mode` on the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpMode {
    /// Graph-aware ring attention (`megagraph_parallel::ring_attention`): key/value blocks
    /// travel the ring; each rank holds the distance index rows of its own block (the default).
    #[default]
    Ring,
    /// Ulysses (`megagraph_parallel::ulysses_attention`): two all-to-alls per
    /// attention scatter the heads and gather the sequence; each rank holds the index of every
    /// row, and `heads` must be a multiple of `cp`.
    Ulysses,
}

impl CpMode {
    /// Both modes, ring first (the order the planner tries them in).
    pub const ALL: [CpMode; 2] = [CpMode::Ring, CpMode::Ulysses];

    /// The mode's name as config files and plans spell it (`ring`, `ulysses`).
    pub fn name(self) -> &'static str {
        match self {
            CpMode::Ring => "ring",
            CpMode::Ulysses => "ulysses",
        }
    }
}

impl std::fmt::Display for CpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

//! [`TemporalScheme`]: how several workers share one temporal training run.

use serde::{Deserialize, Serialize};

/// How the events, the node memory and the steps of an epoch are divided among workers (DistTGL's
/// three baselines and DepBloom). Every scheme all-reduces the model's gradients (the mean over
/// the workers that had a batch) and applies one optimizer step on every worker per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TemporalScheme {
    /// Mini-batch parallelism: one global batch of `workers × batch_size` events cut into
    /// consecutive sub-batches, one per worker; all read the same stale memory, and each node
    /// keeps the write of its last occurrence across the global batch.
    Minibatch,
    /// Epoch parallelism: every worker runs the same batch with its own negatives (as successive
    /// epochs would), against the same memory; the memory write of worker 0 is kept.
    Epoch,
    /// Memory parallelism: the epoch cut into `workers` consecutive time segments, each run by
    /// one worker with its own copy of the memory; only the weights are reduced.
    Memory,
    /// DepBloom: windows of events sharded over workers by topology
    /// ([`WindowShards`](megagraph_graph::temporal::WindowShards)); a worker runs its shard's
    /// events in time order against its own memory, reconciled at window boundaries.
    Depbloom,
}

impl TemporalScheme {
    /// Every scheme with its name, as the command line spells it.
    pub const ALL: [(&'static str, TemporalScheme); 4] = [
        ("minibatch", TemporalScheme::Minibatch),
        ("epoch", TemporalScheme::Epoch),
        ("memory", TemporalScheme::Memory),
        ("depbloom", TemporalScheme::Depbloom),
    ];

    /// The scheme's name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, scheme)| *scheme == self)
            .map_or("minibatch", |(name, _)| name)
    }

    /// The scheme called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, scheme)| *scheme)
    }

    /// Whether the workers' memory is reconciled through the store (every scheme but memory
    /// parallelism, whose groups keep private copies).
    pub fn shares_memory(self) -> bool {
        self != TemporalScheme::Memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, scheme) in TemporalScheme::ALL {
            assert_eq!(scheme.name(), name);
            assert_eq!(TemporalScheme::from_name(name), Some(scheme));
            assert_eq!(
                serde_json::to_string(&scheme).unwrap_or_default(),
                format!("\"{name}\"")
            );
        }
        assert_eq!(TemporalScheme::from_name("ring"), None);
    }
}

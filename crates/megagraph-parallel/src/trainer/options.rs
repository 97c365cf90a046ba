//! [`TrainerOptions`]: what a [`ParallelTrainer`](crate::ParallelTrainer) takes besides the
//! mesh shape, and the `InjectedFault` that tests a run's failure handling.

use std::sync::Arc;
use std::time::Duration;

use burn::optim::AdamWConfig;

use crate::meter::MemoryMeter;
use crate::NodeConfig;

/// A deliberate panic, for tests of failure handling: rank `rank` panics at the start of its
/// first forward pass of step `step` (steps count from 0). It lets a user's own tests check
/// that a failing rank ends the run with an error naming it, instead of a hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectedFault {
    /// The rank that panics.
    pub rank: usize,
    /// The step at which it panics.
    pub step: u64,
}

/// Options of a [`ParallelTrainer`](crate::ParallelTrainer) besides the mesh shape.
#[derive(Clone, Debug)]
pub struct TrainerOptions {
    /// The optimizer every stage runs on its own parameters (AdamW is element-wise, so the
    /// update equals the single-device one given the same gradients).
    pub optimizer: AdamWConfig,
    /// Nodes per sequence as the batch source delivers them; padded to a multiple of `cp`.
    pub seq_len: usize,
    /// The usual number of sequences per step (checked against `dp` and `micro_batches` by
    /// [`ParallelConfig::validate`](crate::ParallelConfig::validate); a step may take any
    /// number of at least `dp * micro_batches`, e.g. a smaller last batch of an epoch).
    pub sequences_per_step: usize,
    /// How long a rank waits for a peer before giving up. Default: 600 s.
    pub timeout: Duration,
    /// A deliberate panic, for tests (`with_fault`). Default: none.
    pub(crate) fault: Option<InjectedFault>,
    /// This process's place in a multi-node run; `None` (the default) or one node: this
    /// process trains alone. See [`nodes`](crate::nodes).
    pub nodes: Option<NodeConfig>,
    /// How each rank measures its [`RankReport::peak_bytes`](crate::RankReport::peak_bytes).
    /// Default (`None`):
    /// [`ThreadAllocatorMeter`](crate::ThreadAllocatorMeter), which measures only when
    /// [`CountingAllocator`](crate::CountingAllocator) is the global allocator (CPU backends);
    /// on a GPU backend give a [`CubeMemoryMeter`](crate::meter) of the device.
    pub meter: Option<Arc<dyn MemoryMeter>>,
    /// Threads of each rank's own rayon pool, where CPU backends run their parallel ops (see
    /// [`threads`](crate::threads)). Default (`None`): this machine's cores divided among this
    /// process's ranks ([`default_threads_per_rank`](crate::threads::default_threads_per_rank)).
    pub threads_per_rank: Option<usize>,
    /// Label smoothing ε of the last stage's cross-entropy (see
    /// [`masked_smoothed_cross_entropy`](megagraph_models::masked_smoothed_cross_entropy)).
    /// Default: 0.0 (plain cross-entropy).
    pub label_smoothing: f64,
}

impl TrainerOptions {
    /// Options with AdamW's defaults, for sequences of `seq_len` nodes and `sequences_per_step`
    /// sequences per step.
    pub fn new(seq_len: usize, sequences_per_step: usize) -> Self {
        Self {
            optimizer: AdamWConfig::new(),
            seq_len,
            sequences_per_step,
            timeout: Duration::from_secs(600),
            fault: None,
            nodes: None,
            meter: None,
            threads_per_rank: None,
            label_smoothing: 0.0,
        }
    }

    /// Sets the optimizer.
    pub fn with_optimizer(mut self, optimizer: AdamWConfig) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// Sets the peer timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Injects a panic (tests of failure handling).
    pub fn with_fault(mut self, fault: InjectedFault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// Sets how each rank measures its peak memory (see [`TrainerOptions::meter`]).
    pub fn with_meter(mut self, meter: Arc<dyn MemoryMeter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Sets the threads of each rank's rayon pool (see [`TrainerOptions::threads_per_rank`]).
    pub fn with_threads_per_rank(mut self, threads: usize) -> Self {
        self.threads_per_rank = Some(threads);
        self
    }

    /// Sets the label smoothing ε of the loss (see [`TrainerOptions::label_smoothing`]).
    pub fn with_label_smoothing(mut self, smoothing: f64) -> Self {
        self.label_smoothing = smoothing;
        self
    }

    /// Makes this process node `nodes.node_rank` of a multi-node run: data parallelism then
    /// spans `nodes.num_nodes` processes (see [`nodes`](crate::nodes)).
    pub fn with_nodes(mut self, nodes: NodeConfig) -> Self {
        self.nodes = Some(nodes);
        self
    }
}

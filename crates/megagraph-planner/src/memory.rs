//! Memory of one device of a pipeline stage, itemized: [`MemoryModel`] computes a
//! [`MemoryBreakdown`].
//!
//! The terms are what is live at once at the peak, which is in the backward pass of the
//! micro-batch that holds the most (the stage's first layer's backward sees every activation).
//! For stage `i` of `pp` holding `k` layers, with `q = sequences_per_step / (dp * m)` sequences
//! of `b = S / cp` local rows per micro-batch and `e` bytes per element:
//!
//! - parameters: `k` layers, the spatial table (every stage reads it), the embedding stage on stage
//!   0 and the head on the last stage, times `e`; gradients the same (the accumulation buffer of
//!   the step's micro-batches); AdamW's two moments twice that;
//! - activations: what every layer (and the embedding/head) keeps for backward, from the profile's
//!   `saved_bytes` (a layer keeps its input, so the head keeps the last layer's output) for `q`
//!   sequences of `b` rows, times the micro-batches in flight. Under 1F1B stage `i` holds
//!   `min(pp - i, m)` of them;
//! - workspace: the largest transient of one part (the attention part's is tile-sized,
//!   `[rows, key_tile, heads]`, never `[S, S, heads]`);
//! - inputs: the batch a micro-batch keeps until its backward: node features and degrees on
//!   stage 0, labels and training weights on the last stage, the padding mask everywhere;
//! - distance index: the rows of the in-flight sequences, `b` per sequence, each as the runtime
//!   holds it ([`Workload::index_row_bytes`]: `S` bytes dense, or the stored pairs sparse).
//!   Under Ulysses (`cp > 1`) a rank attends for every row, and the runtime gathers the whole
//!   sequence's index, dense, on every rank: `S x S` bytes per sequence on top of its own rows;
//! - communication buffers: per in-flight micro-batch the activation sent to the next stage
//!   (it stays the sender's until the receiver's backward frees it), the input gradient being
//!   sent back, and under context parallelism the ring's key/value gradient accumulators
//!   (`dK`, `dV` of a block, travelling with it), or under Ulysses one all-to-all's parts
//!   going out and coming in (two `[q, b, d]` tensors). Ulysses' attention keeps its gathered
//!   `q`, `k`, `v`, output (`[q, S, H / cp, d / H]`) and log-sum-exp for backward: as many
//!   elements as the ring's block attention keeps, so the profile's attention bytes serve
//!   both. The gradient all-reduce runs after the last
//!   backward, when the activations are gone, so it adds nothing to the peak;
//! - runtime overhead: what a rank holds beyond all that (autodiff and optimizer bookkeeping),
//!   measured by the profiler ([`ProfileTable::runtime_overhead_bytes`](crate::ProfileTable)).

use crate::fitted::FittedProfile;
use crate::mesh::CandidateMesh;
use crate::workload::{ModelShape, Workload};
use megagraph_layout::CpMode;
use serde::{Deserialize, Serialize};

/// Bytes of one device of one stage, by term.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBreakdown {
    /// The stage.
    pub stage: usize,
    /// Layers on the stage.
    pub layers: usize,
    /// Micro-batches whose activations the stage holds at once.
    pub in_flight_micro_batches: usize,
    /// Parameters.
    pub parameters: u64,
    /// Gradients.
    pub gradients: u64,
    /// AdamW first and second moments.
    pub optimizer_state: u64,
    /// Activations kept for backward, all in-flight micro-batches.
    pub activations: u64,
    /// Largest transient workspace (attention tiles and accumulators, or a dense part's).
    pub workspace: u64,
    /// The in-flight micro-batches' inputs (features, degrees, labels, weights, padding).
    #[serde(default)]
    pub inputs: u64,
    /// Distance-index rows of the in-flight sequences (dense `u8` or sparse).
    pub distance_index: u64,
    /// Ring-attention and pipeline buffers.
    pub communication_buffers: u64,
    /// The runtime's own bytes (measured by the profiler, see
    /// [`ProfileTable::runtime_overhead_bytes`](crate::ProfileTable)).
    #[serde(default)]
    pub runtime: u64,
}

impl MemoryBreakdown {
    /// Sum of all terms.
    pub fn total(&self) -> u64 {
        self.items().iter().map(|(_, bytes)| bytes).sum()
    }

    /// The terms with their names, in a fixed order.
    pub fn items(&self) -> [(&'static str, u64); 9] {
        [
            ("parameters", self.parameters),
            ("gradients", self.gradients),
            ("optimizer state (AdamW)", self.optimizer_state),
            ("activations", self.activations),
            ("workspace", self.workspace),
            ("inputs", self.inputs),
            ("distance index rows", self.distance_index),
            ("communication buffers", self.communication_buffers),
            ("runtime overhead", self.runtime),
        ]
    }

    /// The largest term and its bytes.
    pub fn largest(&self) -> (&'static str, u64) {
        self.items()
            .into_iter()
            .max_by_key(|&(_, bytes)| bytes)
            .unwrap_or(("parameters", 0))
    }
}

/// Per-candidate memory coefficients; [`stage`](Self::stage) evaluates a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryModel {
    pp: usize,
    micro_batches: usize,
    dtype_bytes: u64,
    layer_parameters: u64,
    spatial_parameters: u64,
    embedding_parameters: u64,
    head_parameters: u64,
    /// Saved bytes per layer and micro-batch.
    layer_saved: f64,
    embedding_saved: f64,
    head_saved: f64,
    layer_workspace: f64,
    embedding_workspace: f64,
    head_workspace: f64,
    /// Distance-index bytes per micro-batch: `q * b` rows of [`Workload::index_row_bytes`]
    /// (and `q * S * S` more under Ulysses).
    index_per_micro_batch: f64,
    /// Input bytes per micro-batch on stage 0 (features, degrees), the last stage (labels,
    /// weights) and every stage (padding).
    first_inputs: f64,
    last_inputs: f64,
    any_inputs: f64,
    /// One micro-batch's activation (or its gradient) at a stage boundary: `q * b * d * e`,
    /// plus the edge encoding's bias `q * heads * b * S * e` when the model has one.
    boundary: f64,
    /// Ring buffers (the dK/dV accumulators of a block), 0 without context parallelism.
    ring: f64,
    /// The runtime's own bytes per rank.
    runtime: u64,
}

impl MemoryModel {
    /// Coefficients for `mesh` training `shape` on `workload`, activations from `fitted`.
    ///
    /// Expects a mesh that [`ParallelConfig::validate`](megagraph_layout::ParallelConfig::validate)
    /// accepts (`cp | S`, `dp * m | sequences_per_step`).
    pub fn new(
        shape: &ModelShape,
        workload: &Workload,
        fitted: &FittedProfile,
        mesh: &CandidateMesh,
    ) -> Self {
        let e = workload.dtype_bytes as f64;
        let d = shape.hidden as f64;
        let (sequences, block) = workload.micro_batch(mesh.cp, mesh.dp, mesh.micro_batches);
        let (sequences, block) = (sequences as f64, block as f64);
        let rows = sequences * block;
        // with an edge encoding the embedding's samples are one sequence of n nodes with the
        // bias of its n² pairs: a micro-batch's embedding is `sequences` of them, each rank's
        // rows a `1 / cp` share
        let edges = shape.edge_feature_dim > 0;
        let seq = workload.seq_len as f64;
        let embedding_bytes = |bytes: &dyn Fn(f64) -> f64| {
            if edges { sequences * bytes(seq) / mesh.cp as f64 } else { bytes(rows) }
        };
        // the edge encoding's bias `[heads, block, S]` per sequence travels with the activations
        let bias = if edges { sequences * shape.heads as f64 * block * seq * e } else { 0.0 };
        let attention_saved = fitted.attention.saved_bytes(sequences, block);
        let attention_workspace = fitted.attention.workspace_bytes(sequences, block);
        // dK and dV of the block travelling the ring with it, or the parts of one Ulysses
        // all-to-all out and in.
        let ring = if mesh.cp > 1 {
            2.0 * rows * d * e
        } else {
            0.0
        };
        let whole_index = if mesh.cp > 1 && mesh.cp_mode == CpMode::Ulysses {
            sequences * (workload.seq_len as f64).powi(2)
        } else {
            0.0
        };
        Self {
            pp: mesh.pp,
            micro_batches: mesh.micro_batches,
            dtype_bytes: workload.dtype_bytes as u64,
            layer_parameters: shape.layer_parameters(),
            spatial_parameters: shape.spatial_table_parameters(),
            embedding_parameters: shape.embedding_parameters(),
            head_parameters: shape.head_parameters(),
            layer_saved: fitted.layer_dense.saved_bytes(rows) + attention_saved,
            embedding_saved: embedding_bytes(&|n| fitted.embedding.saved_bytes(n)),
            head_saved: fitted.head.saved_bytes(rows),
            layer_workspace: fitted
                .layer_dense
                .workspace_bytes(rows)
                .max(attention_workspace),
            embedding_workspace: embedding_bytes(&|n| fitted.embedding.workspace_bytes(n)),
            head_workspace: fitted.head.workspace_bytes(rows),
            index_per_micro_batch: rows * workload.index_row_bytes() as f64 + whole_index,
            // f32 features, two i64 degrees; i64 labels and f32 weights; a bool padding flag
            first_inputs: rows * (e * shape.feature_dim as f64 + 16.0),
            last_inputs: rows * (8.0 + e),
            any_inputs: rows,
            boundary: rows * d * e + bias,
            ring,
            runtime: fitted.runtime_overhead_bytes,
        }
    }

    /// Micro-batches stage `stage` holds at once under 1F1B: `min(pp - stage, m)`.
    pub fn in_flight(&self, stage: usize) -> usize {
        self.pp.saturating_sub(stage).min(self.micro_batches).max(1)
    }

    /// Parameters held by `stage` with `layers` layers.
    pub fn stage_parameters(&self, stage: usize, layers: usize) -> u64 {
        let mut parameters = layers as u64 * self.layer_parameters + self.spatial_parameters;
        if stage == 0 {
            parameters += self.embedding_parameters;
        }
        if stage + 1 == self.pp {
            parameters += self.head_parameters;
        }
        parameters
    }

    /// The memory of one device of `stage` when it holds `layers` layers.
    pub fn stage(&self, stage: usize, layers: usize) -> MemoryBreakdown {
        let first = stage == 0;
        let last = stage + 1 == self.pp;
        let in_flight = self.in_flight(stage);
        let parameter_bytes = self.stage_parameters(stage, layers) * self.dtype_bytes;
        let saved_per_micro_batch = layers as f64 * self.layer_saved
            + if first { self.embedding_saved } else { 0.0 }
            + if last { self.head_saved } else { 0.0 };
        let mut workspace: f64 = if layers > 0 {
            self.layer_workspace
        } else {
            0.0
        };
        if first {
            workspace = workspace.max(self.embedding_workspace);
        }
        if last {
            workspace = workspace.max(self.head_workspace);
        }
        let inputs = self.any_inputs
            + if first { self.first_inputs } else { 0.0 }
            + if last { self.last_inputs } else { 0.0 };
        // outputs sent on and not yet released, and the input gradient being sent back
        let pipeline = if last {
            0.0
        } else {
            in_flight as f64 * self.boundary
        } + if first { 0.0 } else { self.boundary };
        MemoryBreakdown {
            stage,
            layers,
            in_flight_micro_batches: in_flight,
            parameters: parameter_bytes,
            gradients: parameter_bytes,
            optimizer_state: 2 * parameter_bytes,
            activations: (in_flight as f64 * saved_per_micro_batch).ceil() as u64,
            workspace: workspace.ceil() as u64,
            inputs: (in_flight as f64 * inputs).ceil() as u64,
            distance_index: (in_flight as f64 * self.index_per_micro_batch).ceil() as u64,
            communication_buffers: (pipeline + if layers > 0 { self.ring } else { 0.0 }).ceil()
                as u64,
            runtime: self.runtime,
        }
    }
}

/// `bytes` in decimal units for reports: `13.50 GB`, `812.3 MB`, `4.1 kB`, `12 B`.
pub fn format_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ComputeHints;
    use crate::latency::FitOptions;
    use crate::profile::{ProfileLadder, analytic_profile};

    /// A mesh of one replica.
    fn mesh(pp: usize, cp: usize, micro_batches: usize, cp_mode: CpMode) -> CandidateMesh {
        CandidateMesh {
            pp,
            cp,
            dp: 1,
            micro_batches,
            cp_mode,
        }
    }

    fn fitted(shape: &ModelShape) -> FittedProfile {
        let hints = ComputeHints {
            peak_flops: 4.95e14,
            memory_bandwidth_bytes_per_second: 4.8e12,
            efficiency: 0.5,
            kernel_launch_seconds: 5e-6,
        };
        let table = analytic_profile(&hints, "gpu", shape, 4, &ProfileLadder::default()).unwrap();
        FittedProfile::fit(&table, &FitOptions::default()).unwrap()
    }

    fn workload() -> Workload {
        Workload {
            seq_len: 65_536,
            sequences_per_step: 16,
            dtype_bytes: 4,
            near_pairs_per_row: None,
        }
    }

    #[test]
    fn a_sparse_index_counts_its_stored_pairs_and_a_dense_one_every_pair() {
        let shape = ModelShape::paper();
        let fitted = fitted(&shape);
        let mesh = mesh(1, 4, 16, CpMode::Ring);
        let rows = 65_536 / 4;
        let index = |near_pairs_per_row| {
            let workload = Workload {
                near_pairs_per_row,
                ..workload()
            };
            MemoryModel::new(&shape, &workload, &fitted, &mesh).stage(0, 16).distance_index
        };
        assert_eq!(index(None), rows * 65_536);
        // 300 stored pairs a row: 4 + 5 * 300 bytes instead of 65,536
        assert_eq!(index(Some(300)), rows * (4 + 5 * 300));
        // a fifth or more of the pairs stored: the runtime keeps the dense rows
        assert_eq!(index(Some(65_536 / 5 + 1)), rows * 65_536);
        assert_eq!(index(Some(65_536 / 5)), rows * (4 + 5 * (65_536 / 5)));
    }

    #[test]
    fn ulysses_holds_the_whole_index_on_every_rank() {
        let shape = ModelShape::paper();
        let fitted = fitted(&shape);
        let workload = Workload {
            seq_len: 4_096,
            near_pairs_per_row: Some(20),
            ..workload()
        };
        let memory = |cp_mode| {
            let mesh = mesh(1, 4, 16, cp_mode);
            MemoryModel::new(&shape, &workload, &fitted, &mesh).stage(0, 16)
        };
        let (ring, ulysses) = (memory(CpMode::Ring), memory(CpMode::Ulysses));
        // one sequence per micro-batch: the ring keeps its 1024 sparse rows, Ulysses the whole
        // index dense as well
        let own_rows = 1_024 * (4 + 5 * 20);
        assert_eq!(ring.distance_index, own_rows);
        assert_eq!(ulysses.distance_index, own_rows + 4_096 * 4_096);
        // the rest is alike
        assert_eq!(ring.activations, ulysses.activations);
        assert_eq!(ring.communication_buffers, ulysses.communication_buffers);
        assert_eq!(ring.total() + 4_096 * 4_096, ulysses.total());
    }

    #[test]
    fn context_parallelism_halves_the_index_rows_and_activations() {
        let shape = ModelShape::paper();
        let fitted = fitted(&shape);
        let one = MemoryModel::new(&shape, &workload(), &fitted, &mesh(1, 1, 16, CpMode::Ring));
        let two = MemoryModel::new(&shape, &workload(), &fitted, &mesh(1, 2, 16, CpMode::Ring));
        let (a, b) = (one.stage(0, 16), two.stage(0, 16));
        assert_eq!(a.distance_index, 65_536 * 65_536);
        assert_eq!(b.distance_index, 32_768 * 65_536);
        let ratio = a.activations as f64 / b.activations as f64;
        assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
        assert_eq!(a.parameters, b.parameters);
        assert_eq!(a.communication_buffers, 0);
        assert!(b.communication_buffers > 0);
        assert_eq!(2 * b.inputs, a.inputs);
        // Tile-sized workspace: far below one [S, S, heads] f32 tensor.
        assert!((a.workspace as f64) < 1e-2 * (65_536.0f64 * 65_536.0 * 8.0 * 4.0));
    }

    #[test]
    fn formats_bytes_in_decimal_units() {
        assert_eq!(format_bytes(13_500_000_000), "13.50 GB");
        assert_eq!(format_bytes(812_340_000), "812.3 MB");
        assert_eq!(format_bytes(12), "12 B");
    }

    #[test]
    fn one_f_one_b_in_flight_counts() {
        let shape = ModelShape::paper();
        let fitted = fitted(&shape);
        let model = MemoryModel::new(&shape, &workload(), &fitted, &mesh(4, 1, 8, CpMode::Ring));
        assert_eq!(
            (0..4).map(|s| model.in_flight(s)).collect::<Vec<_>>(),
            vec![4, 3, 2, 1]
        );
        let stages: Vec<MemoryBreakdown> = (0..4).map(|s| model.stage(s, 4)).collect();
        assert_eq!(stages[0].distance_index, 4 * stages[3].distance_index);
        assert_eq!(stages[1].distance_index, 3 * stages[3].distance_index);
        // Stage 0 carries the embedding parameters, the last stage the head.
        assert_eq!(
            stages[0].parameters,
            4 * (4 * shape.layer_parameters()
                + shape.spatial_table_parameters()
                + shape.embedding_parameters())
        );
        assert_eq!(
            stages[1].parameters,
            4 * (4 * shape.layer_parameters() + shape.spatial_table_parameters())
        );
        assert_eq!(stages[0].optimizer_state, 2 * stages[0].parameters);
        // Fewer micro-batches than stages caps the in-flight count.
        let short = MemoryModel::new(&shape, &workload(), &fitted, &mesh(4, 1, 2, CpMode::Ring));
        assert_eq!(short.in_flight(0), 2);
        assert_eq!(short.in_flight(3), 1);
        let total: u64 = stages[2].items().iter().map(|(_, b)| b).sum();
        assert_eq!(stages[2].total(), total);
    }
}

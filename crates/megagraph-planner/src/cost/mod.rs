//! The cost model: [`CostModel`] turns a fitted profile, a cluster and a workload into per-stage
//! times and memory of a [`CandidateMesh`] ([`CandidateCost`]) and whole-step estimates
//! ([`StepEstimate`]).
//!
//! Per micro-batch of `q` sequences (`b = S / cp` local rows each, `r = q * b` rows), a stage
//! holding `k` layers takes
//!
//! ```text
//! [stage 0] embedding(r) + k * (dense(r) + ctx_fwd + ctx_bwd) + [last] head(r) + sends
//! ring:    ctx_fwd = (cp - 1) * max(q * attn_fwd(b), send(q * 2 b d e)) + q * attn_fwd(b)   (K, V)
//!          ctx_bwd = (cp - 1) * max(q * attn_bwd(b), send(q * 4 b d e)) + q * attn_bwd(b)   (K, V, dK, dV)
//! ulysses: ctx_fwd = cp * q * attn_fwd(b) + 4 * all_to_all(q b d e)     (q, k, v, output)
//!          ctx_bwd = cp * q * attn_bwd(b) + 4 * all_to_all(q b d e)     (their gradients)
//! sends    = [not last] send(r d e) forward + [not first] send(r d e) backward
//! ```
//!
//! ([`ContextExchange`] has the context terms; the mesh's `cp_mode` picks the line.)
//!
//! each term split into its forward and backward pass (the sends belong to the pass that makes
//! them). A step takes the 1F1B schedule of these passes over the `m` micro-batches
//! ([`one_forward_one_backward_seconds`]; with equal stages `(m - 1) * max stage + sum of
//! stages`), plus the slowest stage's gradient ring all-reduce over its `dp * cp` ranks. The
//! bias is never communicated: every rank reads its own distance-index rows.

use crate::cluster::ClusterSpec;
use crate::comm::{point_to_point_seconds, ring_all_reduce_seconds};
use crate::context_exchange::{ContextExchange, ContextGroup};
use crate::fitted::{FittedProfile, PartFit};
use crate::memory::{MemoryBreakdown, MemoryModel};
use crate::mesh::{GroupLink, CandidateMesh};
use crate::profile::{PassRatios, SoloRatios};
use crate::schedule::{BackwardOverlap, one_forward_one_backward_seconds};
use crate::sharing::MachineSharing;
use crate::stage_pass::StagePass;
use crate::workload::{ModelShape, Workload};
use megagraph_layout::CpMode;

/// Everything needed to cost candidates of one planning problem.
#[derive(Clone, Debug)]
pub struct CostModel {
    shape: ModelShape,
    workload: Workload,
    cluster: ClusterSpec,
    fitted: FittedProfile,
}

/// Per-micro-batch times and memory coefficients of one candidate mesh.
#[derive(Clone, Debug)]
pub struct CandidateCost {
    mesh: CandidateMesh,
    memory: MemoryModel,
    dtype_bytes: f64,
    embedding: StagePass,
    head: StagePass,
    layer_dense: StagePass,
    layer_attention_compute: StagePass,
    context: ContextExchange,
    send: f64,
    overlap: BackwardOverlap,
    solo: Option<SoloRatios>,
    devices_per_node: usize,
    context_link: GroupLink,
    pipeline_link: GroupLink,
    gradient_link: GroupLink,
}

/// The predicted time and memory of a candidate with a given layer split.
#[derive(Clone, Debug, PartialEq)]
pub struct StepEstimate {
    /// Seconds per micro-batch (forward and backward) of each stage.
    pub stage_seconds: Vec<f64>,
    /// Forward and backward seconds per micro-batch of each stage.
    pub stage_passes: Vec<StagePass>,
    /// Seconds of the pipeline schedule.
    pub pipeline_seconds: f64,
    /// Seconds of the slowest stage's gradient all-reduce.
    pub all_reduce_seconds: f64,
    /// Predicted seconds per step.
    pub step_seconds: f64,
    /// Memory of one device of each stage.
    pub memory: Vec<MemoryBreakdown>,
    /// The largest per-device total over stages.
    pub peak_bytes: u64,
    /// What limits the step, in words.
    pub bottleneck: String,
}

impl CostModel {
    /// A cost model for `shape` trained on `workload` on `cluster`, with times and activation
    /// sizes from `fitted`.
    pub fn new(
        shape: ModelShape,
        workload: Workload,
        cluster: ClusterSpec,
        fitted: FittedProfile,
    ) -> Self {
        Self {
            shape,
            workload,
            cluster,
            fitted,
        }
    }

    /// The model shape.
    pub fn shape(&self) -> &ModelShape {
        &self.shape
    }

    /// The workload.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The cluster.
    pub fn cluster(&self) -> &ClusterSpec {
        &self.cluster
    }

    /// Costs of `mesh`. Expects a mesh that fits the cluster and workload (`cp | S`,
    /// `dp * micro_batches | sequences_per_step`).
    pub fn candidate(&self, mesh: CandidateMesh) -> CandidateCost {
        let fitted = &self.fitted;
        let e = self.workload.dtype_bytes as f64;
        let d = self.shape.hidden as f64;
        let block = (self.workload.seq_len / mesh.cp.max(1)) as f64;
        let q = (self.workload.sequences_per_step / (mesh.dp * mesh.micro_batches).max(1)) as f64;
        let rows = q * block;
        let context_link = mesh.context_link(&self.cluster);
        let pipeline_link = mesh.pipeline_link(&self.cluster);
        let gradient_link = mesh.gradient_link(&self.cluster);

        let attention_forward = fitted.attention.forward_seconds(q, block);
        let attention_backward = fitted.attention.backward_seconds(q, block);
        let cp = mesh.cp as f64;
        // the same scores per rank in either mode (see `ContextExchange`)
        let attention_compute = StagePass {
            forward: cp * attention_forward,
            backward: cp * attention_backward,
        };
        let context = ContextExchange::new(
            mesh.cp_mode,
            &ContextGroup {
                ranks: mesh.cp,
                block_bytes: rows * d * e,
                block_compute: StagePass {
                    forward: attention_forward,
                    backward: attention_backward,
                },
                link: context_link.link,
            },
        );
        let part = |fit: &PartFit| StagePass {
            forward: fit.forward_seconds(rows),
            backward: fit.backward_seconds(rows),
        };
        let overlap = if self.cluster.backward_waits_for_other_ranks && !pipeline_link.inter_node {
            BackwardOverlap::WaitsForOthers
        } else {
            BackwardOverlap::Independent
        };

        // with an edge encoding the embedding's samples are one sequence of n nodes with the
        // bias of its n² pairs: a micro-batch's embedding is q of them, each rank's rows a
        // `1 / cp` share
        let seq = self.workload.seq_len as f64;
        // the edge encoding's bias `[q, heads, block, S]` travels with the activations
        let bias_bytes = if self.shape.edge_feature_dim > 0 { q * self.shape.heads as f64 * block * seq * e } else { 0.0 };
        let embedding = if self.shape.edge_feature_dim > 0 {
            let share = q / cp;
            StagePass {
                forward: share * fitted.embedding.forward_seconds(seq),
                backward: share * fitted.embedding.backward_seconds(seq),
            }
        } else {
            part(&fitted.embedding)
        };
        CandidateCost {
            mesh,
            memory: MemoryModel::new(&self.shape, &self.workload, fitted, &mesh),
            dtype_bytes: e,
            embedding,
            head: part(&fitted.head),
            layer_dense: part(&fitted.layer_dense),
            layer_attention_compute: attention_compute,
            context,
            send: point_to_point_seconds(rows * d * e + bias_bytes, &pipeline_link.link),
            overlap,
            solo: fitted.solo,
            devices_per_node: self.cluster.devices_per_node,
            context_link,
            pipeline_link,
            gradient_link,
        }
    }
}

impl CandidateCost {
    /// The mesh.
    pub fn mesh(&self) -> &CandidateMesh {
        &self.mesh
    }

    /// One layer's context-parallel communication per micro-batch.
    pub fn context_exchange(&self) -> &ContextExchange {
        &self.context
    }

    /// Seconds per micro-batch (forward and backward, with its sends) of `stage` holding
    /// `layers` layers.
    pub fn stage_seconds(&self, stage: usize, layers: usize) -> f64 {
        self.stage_pass(stage, layers).total()
    }

    /// Forward and backward seconds per micro-batch of `stage` holding `layers` layers; each
    /// pass includes the transfer it ends with.
    pub fn stage_pass(&self, stage: usize, layers: usize) -> StagePass {
        self.stage_components(stage, layers)
            .iter()
            .fold(StagePass::default(), |sum, (_, pass)| sum + *pass)
    }

    /// The memory of one device of `stage` holding `layers` layers.
    pub fn stage_memory(&self, stage: usize, layers: usize) -> MemoryBreakdown {
        self.memory.stage(stage, layers)
    }

    /// Seconds of the gradient all-reduce of `stage` holding `layers` layers.
    pub fn all_reduce_seconds(&self, stage: usize, layers: usize) -> f64 {
        let bytes = self.memory.stage_parameters(stage, layers) as f64 * self.dtype_bytes;
        ring_all_reduce_seconds(bytes, self.mesh.dp * self.mesh.cp, &self.gradient_link.link)
    }

    /// Forward and backward seconds per micro-batch of `stage` holding `layers` layers while no
    /// other rank of its machine computes: each part's time scaled by the profile's
    /// [`SoloRatios`] (communication unchanged); [`stage_pass`](Self::stage_pass) when the
    /// profile has none.
    pub fn stage_solo_pass(&self, stage: usize, layers: usize) -> StagePass {
        let Some(solo) = &self.solo else {
            return self.stage_pass(stage, layers);
        };
        let ratios = [
            solo.embedding,
            solo.layer_dense,
            solo.attention,
            PassRatios::ONE,
            solo.head,
            PassRatios::ONE,
        ];
        self.stage_components(stage, layers)
            .iter()
            .zip(ratios)
            .fold(StagePass::default(), |sum, ((_, pass), ratios)| {
                sum + ratios.scale(*pass)
            })
    }

    /// How the stages share machines: with the profile's [`SoloRatios`], stages whose ranks
    /// share a machine run faster while the others wait; without, every pass keeps its time.
    pub fn sharing(&self, stage_layers: &[usize]) -> MachineSharing {
        match &self.solo {
            Some(solo) => MachineSharing::on_machines(
                &self.mesh,
                self.devices_per_node,
                stage_layers
                    .iter()
                    .enumerate()
                    .map(|(stage, &layers)| self.stage_solo_pass(stage, layers))
                    .collect(),
                solo.copies,
            ),
            None => MachineSharing::dedicated(),
        }
    }

    /// The stage's passes split into named components (the order
    /// [`stage_solo_pass`](Self::stage_solo_pass) scales them in).
    fn stage_components(&self, stage: usize, layers: usize) -> [(&'static str, StagePass); 6] {
        let k = layers as f64;
        let first = stage == 0;
        let last = stage + 1 == self.mesh.pp;
        let times = |pass: StagePass, k: f64| StagePass {
            forward: k * pass.forward,
            backward: k * pass.backward,
        };
        let only = |pass: StagePass, here: bool| if here { pass } else { StagePass::default() };
        [
            ("embedding", only(self.embedding, first)),
            ("dense layer compute", times(self.layer_dense, k)),
            ("attention compute", times(self.layer_attention_compute, k)),
            (
                match (self.context.mode, self.context_link.inter_node) {
                    (CpMode::Ring, false) => "exposed ring K/V exchange",
                    (CpMode::Ring, true) => "exposed ring K/V exchange (inter-node)",
                    (CpMode::Ulysses, false) => "Ulysses all-to-alls",
                    (CpMode::Ulysses, true) => "Ulysses all-to-alls (inter-node)",
                },
                times(self.context.exposed, k),
            ),
            ("head", only(self.head, last)),
            (
                if self.pipeline_link.inter_node {
                    "pipeline transfers (inter-node)"
                } else {
                    "pipeline transfers"
                },
                // activations forward (all but the last stage), gradients back (all but the
                // first)
                StagePass {
                    forward: if last { 0.0 } else { self.send },
                    backward: if first { 0.0 } else { self.send },
                },
            ),
        ]
    }

    /// The full estimate for a layer split (`stage_layers.len() == pp`).
    pub fn estimate(&self, stage_layers: &[usize]) -> StepEstimate {
        let stage_passes: Vec<StagePass> = stage_layers
            .iter()
            .enumerate()
            .map(|(s, &k)| self.stage_pass(s, k))
            .collect();
        let stage_seconds: Vec<f64> = stage_passes.iter().map(StagePass::total).collect();
        let pipeline = one_forward_one_backward_seconds(
            &stage_passes,
            self.mesh.micro_batches,
            self.overlap,
            &self.sharing(stage_layers),
        );
        let all_reduce = stage_layers
            .iter()
            .enumerate()
            .map(|(s, &k)| self.all_reduce_seconds(s, k))
            .fold(0.0, f64::max);
        let memory: Vec<MemoryBreakdown> = stage_layers
            .iter()
            .enumerate()
            .map(|(s, &k)| self.stage_memory(s, k))
            .collect();
        let peak_bytes = memory.iter().map(MemoryBreakdown::total).max().unwrap_or(0);
        let step = pipeline + all_reduce;
        let bottleneck =
            self.describe_bottleneck(stage_layers, &stage_seconds, pipeline, all_reduce, step);
        StepEstimate {
            stage_seconds,
            stage_passes,
            pipeline_seconds: pipeline,
            all_reduce_seconds: all_reduce,
            step_seconds: step,
            memory,
            peak_bytes,
            bottleneck,
        }
    }

    fn describe_bottleneck(
        &self,
        stage_layers: &[usize],
        stage_seconds: &[f64],
        pipeline: f64,
        all_reduce: f64,
        step: f64,
    ) -> String {
        let share = |part: f64| if step > 0.0 { 100.0 * part / step } else { 0.0 };
        let ranks = self.mesh.dp * self.mesh.cp;
        let reach = if self.gradient_link.inter_node {
            "inter-node"
        } else {
            "intra-node"
        };
        if all_reduce > pipeline {
            return format!(
                "gradient all-reduce over {ranks} ranks ({reach}): {:.0}% of the step",
                share(all_reduce)
            );
        }
        let (slowest, &seconds) = stage_seconds
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap_or((0, &0.0));
        let layers = stage_layers.get(slowest).copied().unwrap_or(0);
        let (component, part) = self
            .stage_components(slowest, layers)
            .into_iter()
            .map(|(name, pass)| (name, pass.total()))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(("nothing", 0.0));
        let mut holds = Vec::new();
        if slowest == 0 {
            holds.push("embedding".to_string());
        }
        holds.push(if layers == 1 {
            "1 layer".to_string()
        } else {
            format!("{layers} layers")
        });
        if slowest + 1 == self.mesh.pp {
            holds.push("head".to_string());
        }
        let mut text = format!(
            "stage {slowest} of {} ({}): {:.2} ms per micro-batch, mostly {component} ({:.0}%)",
            self.mesh.pp,
            holds.join(" + "),
            seconds * 1e3,
            if seconds > 0.0 {
                100.0 * part / seconds
            } else {
                0.0
            }
        );
        let fill_drain = stage_seconds.iter().sum::<f64>() - seconds;
        if share(fill_drain) >= 20.0 {
            text.push_str(&format!(
                "; pipeline fill/drain {:.0}% of the step",
                share(fill_drain)
            ));
        }
        if share(all_reduce) >= 20.0 {
            text.push_str(&format!(
                "; gradient all-reduce ({reach}) {:.0}% of the step",
                share(all_reduce)
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests;

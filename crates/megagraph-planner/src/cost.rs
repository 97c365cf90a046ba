//! The cost model: [`CostModel`] turns a fitted profile, a cluster and a workload into per-stage
//! times and memory of a candidate [`Mesh`] ([`CandidateCost`]) and whole-step estimates
//! ([`StepEstimate`]).
//!
//! Per micro-batch of `q` sequences (`b = S / cp` local rows each, `r = q * b` rows), a stage
//! holding `k` layers takes
//!
//! ```text
//! [stage 0] embedding(r) + k * (dense(r) + ring_fwd + ring_bwd) + [last] head(r) + sends
//! ring_fwd = (cp - 1) * max(q * attn_fwd(b), send(q * 2 b d e)) + q * attn_fwd(b)   (K, V travel)
//! ring_bwd = (cp - 1) * max(q * attn_bwd(b), send(q * 4 b d e)) + q * attn_bwd(b)   (K, V, dK, dV)
//! sends    = [not last] send(r d e) forward + [not first] send(r d e) backward
//! ```
//!
//! each term split into its forward and backward pass (the sends belong to the pass that makes
//! them). A step takes the 1F1B schedule of these passes over the `m` micro-batches
//! ([`one_forward_one_backward_seconds`]; with equal stages `(m - 1) * max stage + sum of
//! stages`), plus the slowest stage's gradient ring all-reduce over its `dp * cp` ranks. The
//! bias is never communicated: every rank reads its own distance-index rows.

use crate::cluster::ClusterSpec;
use crate::comm::{point_to_point_seconds, ring_all_reduce_seconds, ring_attention_seconds};
use crate::fitted::{FittedProfile, PartFit};
use crate::memory::{MemoryBreakdown, MemoryModel};
use crate::mesh::{GroupLink, Mesh};
use crate::profile::{PassRatios, SoloRatios};
use crate::schedule::{BackwardOverlap, one_forward_one_backward_seconds};
use crate::sharing::MachineSharing;
use crate::stage_pass::StagePass;
use crate::workload::{ModelShape, Workload};

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
    mesh: Mesh,
    memory: MemoryModel,
    dtype_bytes: f64,
    embedding: StagePass,
    head: StagePass,
    layer_dense: StagePass,
    layer_attention_compute: StagePass,
    layer_ring_exposed: StagePass,
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
    pub fn candidate(&self, mesh: Mesh) -> CandidateCost {
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
        let kv_forward = point_to_point_seconds(q * 2.0 * block * d * e, &context_link.link);
        let kv_backward = point_to_point_seconds(q * 4.0 * block * d * e, &context_link.link);
        let cp = mesh.cp as f64;
        let attention_compute = StagePass {
            forward: cp * attention_forward,
            backward: cp * attention_backward,
        };
        let ring_exposed = StagePass {
            forward: (ring_attention_seconds(mesh.cp, attention_forward, kv_forward)
                - attention_compute.forward)
                .max(0.0),
            backward: (ring_attention_seconds(mesh.cp, attention_backward, kv_backward)
                - attention_compute.backward)
                .max(0.0),
        };
        let part = |fit: &PartFit| StagePass {
            forward: fit.forward_seconds(rows),
            backward: fit.backward_seconds(rows),
        };
        let overlap = if self.cluster.backward_waits_for_other_ranks && !pipeline_link.inter_node {
            BackwardOverlap::WaitsForOthers
        } else {
            BackwardOverlap::Independent
        };

        CandidateCost {
            mesh,
            memory: MemoryModel::new(&self.shape, &self.workload, fitted, &mesh),
            dtype_bytes: e,
            embedding: part(&fitted.embedding),
            head: part(&fitted.head),
            layer_dense: part(&fitted.layer_dense),
            layer_attention_compute: attention_compute,
            layer_ring_exposed: ring_exposed,
            send: point_to_point_seconds(rows * d * e, &pipeline_link.link),
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
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
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
                if self.context_link.inter_node {
                    "exposed ring K/V exchange (inter-node)"
                } else {
                    "exposed ring K/V exchange"
                },
                times(self.layer_ring_exposed, k),
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
mod tests {
    use super::*;
    use crate::cluster::{ComputeHints, LinkSpec};
    use crate::latency::FitOptions;
    use crate::profile::{ProfileLadder, analytic_profile};

    fn model(inter_bandwidth: f64) -> CostModel {
        model_waiting(inter_bandwidth, false)
    }

    fn model_waiting(inter_bandwidth: f64, backward_waits_for_other_ranks: bool) -> CostModel {
        let hints = ComputeHints {
            peak_flops: 4.95e14,
            memory_bandwidth_bytes_per_second: 4.8e12,
            efficiency: 0.5,
            kernel_launch_seconds: 5e-6,
        };
        let shape = ModelShape::paper();
        let table = analytic_profile(&hints, "gpu", &shape, 4, &ProfileLadder::default()).unwrap();
        let fitted = FittedProfile::fit(&table, &FitOptions::default()).unwrap();
        let cluster = ClusterSpec {
            name: "t".into(),
            device: "gpu".into(),
            nodes: 2,
            devices_per_node: 2,
            memory_bytes_per_device: 141_000_000_000,
            intra_node: LinkSpec {
                bandwidth_bytes_per_second: 450e9,
                latency_seconds: 2e-6,
            },
            inter_node: Some(LinkSpec {
                bandwidth_bytes_per_second: inter_bandwidth,
                latency_seconds: 1e-5,
            }),
            compute: Some(hints),
            backward_waits_for_other_ranks,
        };
        let workload = Workload {
            seq_len: 16_384,
            sequences_per_step: 8,
            dtype_bytes: 4,
            near_pairs_per_row: None,
        };
        CostModel::new(shape, workload, cluster, fitted)
    }

    #[test]
    fn context_parallelism_splits_the_attention_work() {
        let model = model(50e9);
        let one = model.candidate(Mesh {
            pp: 1,
            cp: 1,
            dp: 1,
            micro_batches: 8,
        });
        let two = model.candidate(Mesh {
            pp: 1,
            cp: 2,
            dp: 1,
            micro_batches: 8,
        });
        let (t1, t2) = (one.stage_seconds(0, 16), two.stage_seconds(0, 16));
        // Quadratic attention work halves per rank; nothing much is exposed on NVLink.
        assert!(t2 < 0.6 * t1 && t2 > 0.45 * t1, "{t1} {t2}");
        let step = two.estimate(&[16]);
        assert!((step.pipeline_seconds - 8.0 * t2).abs() < 1e-9 * t2);
        assert!(step.all_reduce_seconds > 0.0);
        assert_eq!(one.all_reduce_seconds(0, 16), 0.0);
    }

    #[test]
    fn slow_links_expose_the_ring_and_name_it() {
        let model = model(1e6);
        // cp = 4 on 2 x 2 devices: the ring crosses nodes.
        let cost = model.candidate(Mesh {
            pp: 1,
            cp: 4,
            dp: 1,
            micro_batches: 8,
        });
        let estimate = cost.estimate(&[16]);
        assert!(
            estimate
                .bottleneck
                .contains("exposed ring K/V exchange (inter-node)"),
            "{}",
            estimate.bottleneck
        );
    }

    #[test]
    fn pipeline_stage_times_include_the_sends() {
        let model = model(50e9);
        let cost = model.candidate(Mesh {
            pp: 2,
            cp: 1,
            dp: 1,
            micro_batches: 8,
        });
        let estimate = cost.estimate(&[8, 8]);
        assert_eq!(estimate.stage_seconds.len(), 2);
        // Stage 0 has the embedding, stage 1 the head; both send once.
        let layer = cost.stage_seconds(1, 9) - cost.stage_seconds(1, 8);
        assert!(layer > 0.0);
        let expected = 7.0 * estimate.stage_seconds[0].max(estimate.stage_seconds[1])
            + estimate.stage_seconds.iter().sum::<f64>();
        assert!((estimate.pipeline_seconds - expected).abs() < 1e-12);
        assert_eq!(estimate.memory[0].in_flight_micro_batches, 2);
        assert_eq!(estimate.memory[1].in_flight_micro_batches, 1);
    }

    #[test]
    fn stages_of_one_machine_whose_backward_passes_wait_take_longer() {
        let mesh = |pp| Mesh {
            pp,
            cp: 1,
            dp: 1,
            micro_batches: 8,
        };
        // pp = 2 on the first node
        let independent = model(50e9).candidate(mesh(2)).estimate(&[8, 8]);
        let waiting = model_waiting(50e9, true)
            .candidate(mesh(2))
            .estimate(&[8, 8]);
        assert_eq!(waiting.stage_passes, independent.stage_passes);
        assert!(
            waiting.pipeline_seconds > independent.pipeline_seconds,
            "{} vs {}",
            waiting.pipeline_seconds,
            independent.pipeline_seconds
        );
        assert_eq!(
            waiting.pipeline_seconds,
            one_forward_one_backward_seconds(
                &waiting.stage_passes,
                8,
                BackwardOverlap::WaitsForOthers,
                &MachineSharing::dedicated()
            )
        );
        // pp = 4 spans both nodes: separate processes, nothing waits
        let independent = model(50e9).candidate(mesh(4)).estimate(&[4, 4, 4, 4]);
        let waiting = model_waiting(50e9, true)
            .candidate(mesh(4))
            .estimate(&[4, 4, 4, 4]);
        assert_eq!(waiting.pipeline_seconds, independent.pipeline_seconds);
    }

    #[test]
    fn stages_sharing_a_machine_run_faster_while_the_others_wait() {
        let dedicated = model_waiting(50e9, true);
        let mut fitted = dedicated.fitted.clone();
        let half = PassRatios {
            forward: 0.5,
            backward: 0.5,
        };
        fitted.solo = Some(SoloRatios {
            copies: 2,
            embedding: half,
            layer_dense: half,
            attention: half,
            head: half,
        });
        let shared = CostModel::new(
            dedicated.shape.clone(),
            dedicated.workload.clone(),
            dedicated.cluster.clone(),
            fitted,
        );
        let mesh = |pp, cp| Mesh {
            pp,
            cp,
            dp: 1,
            micro_batches: 8,
        };
        // pp = 2 on the first machine: computing alone halves every part, not the transfers
        // (stage 0 sends its activations forward and nothing backward)
        let cost = shared.candidate(mesh(2, 1));
        let (pass, solo) = (cost.stage_pass(0, 8), cost.stage_solo_pass(0, 8));
        assert!(solo.forward > 0.5 * pass.forward && solo.forward < 0.51 * pass.forward);
        assert!((solo.backward - 0.5 * pass.backward).abs() < 1e-12 * pass.backward);
        let without = dedicated.candidate(mesh(2, 1)).estimate(&[8, 8]);
        let with = cost.estimate(&[8, 8]);
        assert_eq!(with.stage_passes, without.stage_passes);
        assert!(
            with.pipeline_seconds < without.pipeline_seconds,
            "{} vs {}",
            with.pipeline_seconds,
            without.pipeline_seconds
        );
        // one stage's ranks always compute together: nothing changes
        let one = shared.candidate(mesh(1, 2)).estimate(&[16]);
        let alone = dedicated.candidate(mesh(1, 2)).estimate(&[16]);
        assert_eq!(one.pipeline_seconds, alone.pipeline_seconds);
    }

    #[test]
    fn passes_split_every_stage_into_forward_and_backward() {
        let cost = model(50e9).candidate(Mesh {
            pp: 2,
            cp: 2,
            dp: 1,
            micro_batches: 4,
        });
        for (stage, layers) in [(0, 3), (1, 5)] {
            let pass = cost.stage_pass(stage, layers);
            assert!(pass.forward > 0.0 && pass.backward > 0.0);
            assert!((pass.total() - cost.stage_seconds(stage, layers)).abs() < 1e-15);
        }
    }
}

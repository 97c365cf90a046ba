//! [`SimulatedStudy`]: plans for one model at several sequence lengths on several device counts of
//! simulated clusters (analytic profiles), with the layouts that run out of memory — the
//! "simulated cluster" report.

use crate::api::{PlanError, cluster_analytic_profile, plan};
use crate::cluster::ClusterSpec;
use crate::memory::format_bytes;
use crate::plan::Plan;
use crate::report::RejectReason;
use crate::search::SearchError;
use crate::search_options::SearchOptions;
use crate::workload::{ModelShape, Workload};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A grid of sequence lengths and device counts to plan for.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatedStudy {
    /// The model.
    pub shape: ModelShape,
    /// Sequence lengths `S`.
    pub seq_lens: Vec<usize>,
    /// Device counts; up to one node's worth are taken from the single-node cluster, more from
    /// the multi-node one.
    pub device_counts: Vec<usize>,
    /// Nodes per step: `sequences_per_step = max(1, nodes_per_step / S)`.
    pub nodes_per_step: usize,
    /// Bytes per element.
    pub dtype_bytes: usize,
    /// Search options.
    pub options: SearchOptions,
}

/// One cell of the grid.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatedRow {
    /// Sequence length.
    pub seq_len: usize,
    /// Devices.
    pub devices: usize,
    /// Cluster the devices were taken from.
    pub cluster: String,
    /// Usable bytes per device.
    pub memory_limit_bytes: u64,
    /// Sequences per step.
    pub sequences_per_step: usize,
    /// The best plan, `None` when nothing fits.
    pub best: Option<Plan>,
    /// Plans that fit.
    pub feasible: usize,
    /// `(layout, micro-batch count)` pairs that ran out of memory.
    pub out_of_memory_configs: usize,
    /// Layouts that ran out of memory at every micro-batch count tried.
    pub out_of_memory_layouts: Vec<OutOfMemoryLayout>,
}

/// A `pp x cp x dp` layout that does not fit at any micro-batch count.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemoryLayout {
    /// Pipeline stages.
    pub pp: usize,
    /// Context-parallel degree.
    pub cp: usize,
    /// Data-parallel degree.
    pub dp: usize,
    /// Smallest excess over the limit among its micro-batch counts.
    pub smallest_excess_bytes: u64,
    /// The largest memory term at that smallest excess.
    pub largest_term: &'static str,
}

/// The study's results.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatedReport {
    /// The model.
    pub shape: ModelShape,
    /// Nodes per step.
    pub nodes_per_step: usize,
    /// Bytes per element.
    pub dtype_bytes: usize,
    /// One row per (sequence length, device count), sequence length major.
    pub rows: Vec<SimulatedRow>,
}

impl SimulatedStudy {
    /// The paper's model (16 layers, 8 heads, hidden = FFN = 64) at `S` in {16K, 64K, 256K} on
    /// 1, 2, 4, 8 and 32 devices, 2^21 nodes per step (about one epoch of ogbn-products), f32.
    pub fn paper() -> Self {
        Self {
            shape: ModelShape::paper(),
            seq_lens: vec![16_384, 65_536, 262_144],
            device_counts: vec![1, 2, 4, 8, 32],
            nodes_per_step: 1 << 21,
            dtype_bytes: 4,
            options: SearchOptions::default(),
        }
    }

    /// [`paper`](Self::paper) with one sequence per step: data parallelism and micro-batching
    /// have nothing to split, so context and pipeline parallelism must carry the sequence.
    pub fn paper_one_sequence_per_step() -> Self {
        Self {
            nodes_per_step: 1,
            ..Self::paper()
        }
    }

    /// Plans every cell: device counts up to `single_node.devices()` on the first devices of
    /// `single_node`, larger ones on the first devices of `multi_node`.
    pub fn run(
        &self,
        single_node: &ClusterSpec,
        multi_node: &ClusterSpec,
    ) -> Result<SimulatedReport, PlanError> {
        let mut rows = Vec::new();
        for &seq_len in &self.seq_lens {
            for &devices in &self.device_counts {
                let source = if devices <= single_node.devices() {
                    single_node
                } else {
                    multi_node
                };
                let cluster = source.first_devices(devices)?;
                let workload = Workload {
                    seq_len,
                    sequences_per_step: (self.nodes_per_step / seq_len).max(1),
                    dtype_bytes: self.dtype_bytes,
                    near_pairs_per_row: None,
                };
                let profile = cluster_analytic_profile(&cluster, &self.shape, self.dtype_bytes)?;
                rows.push(self.row(
                    &cluster,
                    &workload,
                    plan(&cluster, &self.shape, &workload, &profile, &self.options),
                )?);
            }
        }
        Ok(SimulatedReport {
            shape: self.shape.clone(),
            nodes_per_step: self.nodes_per_step,
            dtype_bytes: self.dtype_bytes,
            rows,
        })
    }

    fn row(
        &self,
        cluster: &ClusterSpec,
        workload: &Workload,
        outcome: Result<crate::report::PlanReport, PlanError>,
    ) -> Result<SimulatedRow, PlanError> {
        let limit = (cluster.memory_bytes_per_device as f64
            * self.options.memory_fraction.clamp(0.0, 1.0))
        .floor() as u64;
        let (best, fitting_layouts, rejected) = match outcome {
            Ok(report) => {
                let fitting: BTreeSet<(usize, usize, usize)> = report
                    .candidates
                    .iter()
                    .map(|p| (p.layout.pp, p.layout.cp, p.layout.dp))
                    .collect();
                let feasible = report.candidates.len();
                (Some((report.best, feasible)), fitting, report.rejected)
            }
            Err(PlanError::Search(SearchError::NothingFits { rejected, .. }))
            | Err(PlanError::Search(SearchError::NoValidLayout { rejected, .. })) => {
                (None, BTreeSet::new(), rejected)
            }
            Err(other) => return Err(other),
        };
        // Per layout that never fits: the smallest excess over its micro-batch counts.
        let mut layouts: BTreeMap<(usize, usize, usize), (u64, &'static str)> = BTreeMap::new();
        let mut out_of_memory_configs = 0;
        for rejection in &rejected {
            if let RejectReason::OutOfMemory { breakdown, .. } = &rejection.reason {
                out_of_memory_configs += 1;
                let c = &rejection.config;
                if fitting_layouts.contains(&(c.pp, c.cp, c.dp)) {
                    continue;
                }
                let over = rejection.reason.over_by_bytes().unwrap_or(0);
                let entry = layouts.entry((c.pp, c.cp, c.dp)).or_insert((u64::MAX, ""));
                if over < entry.0 {
                    *entry = (over, breakdown.largest().0);
                }
            }
        }
        let (best, feasible) = match best {
            Some((plan, count)) => (Some(plan), count),
            None => (None, 0),
        };
        Ok(SimulatedRow {
            seq_len: workload.seq_len,
            devices: cluster.devices(),
            cluster: cluster.name.clone(),
            memory_limit_bytes: limit,
            sequences_per_step: workload.sequences_per_step,
            best,
            feasible,
            out_of_memory_configs,
            out_of_memory_layouts: layouts
                .into_iter()
                .map(|((pp, cp, dp), (over, term))| OutOfMemoryLayout {
                    pp,
                    cp,
                    dp,
                    smallest_excess_bytes: over,
                    largest_term: term,
                })
                .collect(),
        })
    }
}

impl fmt::Display for SimulatedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        writeln!(
            f,
            "Simulated clusters (analytic profile): {} layers, {} heads, hidden {}, ffn {}, {} B elements, {} nodes per step",
            s.layers, s.heads, s.hidden, s.ffn_hidden, self.dtype_bytes, self.nodes_per_step
        )?;
        writeln!(
            f,
            "{:>7} {:>4} {:>5} {:<30} {:>10} {:>8} {:>11}  out of memory at every micro-batch count",
            "S",
            "devs",
            "seqs",
            "best plan (pp x cp x dp, mb, split)",
            "s/step",
            "speedup",
            "peak/dev"
        )?;
        for row in &self.rows {
            let single = self
                .rows
                .iter()
                .find(|r| r.seq_len == row.seq_len && r.devices == 1)
                .and_then(|r| r.best.as_ref());
            let (plan_text, seconds, speedup, peak) = match &row.best {
                Some(best) => (
                    format!(
                        "{}x{}x{} mb={} {:?}",
                        best.layout.pp,
                        best.layout.cp,
                        best.layout.dp,
                        best.layout.micro_batches,
                        best.layout.stage_layers
                    ),
                    format!("{:.3}", best.predicted.step_seconds),
                    single.map_or("-".to_string(), |one| {
                        format!(
                            "{:.2}x",
                            one.predicted.step_seconds / best.predicted.step_seconds
                        )
                    }),
                    format_bytes(best.predicted.peak_bytes_per_device),
                ),
                None => (
                    "NOTHING FITS".to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ),
            };
            let oom: Vec<String> = row
                .out_of_memory_layouts
                .iter()
                .map(|l| {
                    format!(
                        "{}x{}x{} (+{}, {})",
                        l.pp,
                        l.cp,
                        l.dp,
                        format_bytes(l.smallest_excess_bytes),
                        l.largest_term
                    )
                })
                .collect();
            writeln!(
                f,
                "{:>7} {:>4} {:>5} {:<30} {:>10} {:>8} {:>11}  {}",
                row.seq_len,
                row.devices,
                row.sequences_per_step,
                plan_text,
                seconds,
                speedup,
                peak,
                if oom.is_empty() {
                    "none".to_string()
                } else {
                    oom.join(", ")
                }
            )?;
        }
        Ok(())
    }
}

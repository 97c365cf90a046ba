//! [`PlanReport::explain`]: a plan report as human-readable tables.

use crate::memory::format_bytes;
use crate::report::{PlanReport, RejectReason};
use std::fmt::Write;

/// Ranked alternatives shown by [`PlanReport::explain`].
const SHOWN_CANDIDATES: usize = 10;
/// Rejections listed by [`PlanReport::explain`].
const SHOWN_REJECTIONS: usize = 10;

impl PlanReport {
    /// The best plan, its bottleneck, the ranked alternatives, the memory breakdown of the best
    /// plan per stage and the rejections (closest out-of-memory ones first), as text.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_explanation(&mut out);
        out
    }

    fn write_explanation(&self, out: &mut String) -> std::fmt::Result {
        let setting = &self.setting;
        let best = &self.best;
        writeln!(
            out,
            "Plan for {} layers, S = {}, {} sequences per step on {} ({} devices, {} usable per device)",
            setting.layers,
            setting.seq_len,
            setting.sequences_per_step,
            setting.cluster,
            setting.devices,
            format_bytes(setting.memory_limit_bytes)
        )?;
        writeln!(
            out,
            "Best: pp={} cp={} dp={} micro_batches={} stage_layers={:?} cp_mode={}: {:.4} s per step, peak {} per device",
            best.layout.pp,
            best.layout.cp,
            best.layout.dp,
            best.layout.micro_batches,
            best.layout.stage_layers,
            best.layout.cp_mode,
            best.predicted.step_seconds,
            format_bytes(best.predicted.peak_bytes_per_device)
        )?;
        writeln!(out, "Bottleneck: {}", best.predicted.bottleneck)?;
        writeln!(out, "Context mode: {}", self.cp_mode_reason)?;

        writeln!(
            out,
            "\nRanked plans ({} of {}):",
            self.candidates.len().min(SHOWN_CANDIDATES),
            self.candidates.len()
        )?;
        writeln!(
            out,
            "{:>4} {:>3} {:>3} {:>7} {:>3} {:>5}  {:<18} {:>10} {:>9} {:>11}  bottleneck",
            "rank", "pp", "cp", "mode", "dp", "mb", "stage_layers", "s/step", "vs best", "peak/dev"
        )?;
        for (rank, plan) in self.candidates.iter().take(SHOWN_CANDIDATES).enumerate() {
            writeln!(
                out,
                "{:>4} {:>3} {:>3} {:>7} {:>3} {:>5}  {:<18} {:>10.4} {:>8.2}x {:>11}  {}",
                rank + 1,
                plan.layout.pp,
                plan.layout.cp,
                plan.layout.cp_mode.name(),
                plan.layout.dp,
                plan.layout.micro_batches,
                format!("{:?}", plan.layout.stage_layers),
                plan.predicted.step_seconds,
                plan.predicted.step_seconds / best.predicted.step_seconds.max(f64::MIN_POSITIVE),
                format_bytes(plan.predicted.peak_bytes_per_device),
                plan.predicted.bottleneck
            )?;
        }

        writeln!(out, "\nMemory of the best plan, per device:")?;
        write!(out, "{:<26}", "term")?;
        for stage in &self.best_memory {
            write!(out, " {:>14}", format!("stage {}", stage.stage))?;
        }
        writeln!(out)?;
        let rows = self.best_memory.first().map_or(0, |m| m.items().len());
        for row in 0..rows {
            write!(out, "{:<26}", self.best_memory[0].items()[row].0)?;
            for stage in &self.best_memory {
                write!(out, " {:>14}", format_bytes(stage.items()[row].1))?;
            }
            writeln!(out)?;
        }
        write!(out, "{:<26}", "total")?;
        for stage in &self.best_memory {
            write!(out, " {:>14}", format_bytes(stage.total()))?;
        }
        writeln!(out)?;
        write!(out, "{:<26}", "(layers, in flight)")?;
        for stage in &self.best_memory {
            write!(
                out,
                " {:>14}",
                format!("{}, {}", stage.layers, stage.in_flight_micro_batches)
            )?;
        }
        writeln!(out)?;

        let out_of_memory = self
            .rejected
            .iter()
            .filter(|r| r.reason.over_by_bytes().is_some())
            .count();
        writeln!(
            out,
            "\nRejected: {} configurations ({} out of memory, {} invalid layouts)",
            self.rejected.len(),
            out_of_memory,
            self.rejected.len() - out_of_memory
        )?;
        let mut listed: Vec<_> = self.rejected.iter().collect();
        listed.sort_by_key(|r| match &r.reason {
            RejectReason::OutOfMemory { .. } => (0, r.reason.over_by_bytes().unwrap_or(0)),
            RejectReason::Invalid { .. } => (1, 0),
        });
        for rejection in listed.iter().take(SHOWN_REJECTIONS) {
            writeln!(out, "  {rejection}")?;
        }
        if listed.len() > SHOWN_REJECTIONS {
            writeln!(out, "  ... and {} more", listed.len() - SHOWN_REJECTIONS)?;
        }
        writeln!(out, "\nSearch took {:.1} ms", self.search_seconds * 1e3)
    }
}

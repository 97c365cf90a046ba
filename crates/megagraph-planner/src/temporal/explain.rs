//! [`TemporalPlan::explain`]: a temporal plan as text, with the numbers that decided it.

use std::fmt::Write;

use super::search::{RefineReason, TIME_BUDGET, TemporalPlan, WINDOW_TOLERANCE};

impl TemporalPlan {
    /// The suggestion, why this refinement count (every count measured, its time and
    /// staleness), and why this window (every window's predicted epoch and its terms).
    pub fn explain(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_explanation(&mut out);
        out
    }

    fn write_explanation(&self, out: &mut String) -> std::fmt::Result {
        let (p, s) = (&self.predicted, &self.setting);
        writeln!(
            out,
            "DepBloom plan for {} on {} ({} workers, batches of {} events, {} training events, {}):",
            s.model, s.dataset, s.workers, s.batch_size, s.train_events, s.backend
        )?;
        writeln!(
            out,
            "  --window {} --refine {}: {:.3} s per epoch predicted ({:.3} compute, {:.3} sync, {:.3} reconcile; {} steps, {} syncs), staleness {:.4}",
            self.window,
            self.refine,
            p.epoch_seconds,
            p.compute_seconds,
            p.sync_seconds,
            p.reconcile_seconds,
            p.steps,
            p.syncs,
            p.staleness
        )?;
        writeln!(
            out,
            "\nRefine {}: {}",
            self.refine,
            match &self.refine_reason {
                RefineReason::PlainIsFresh => format!(
                    "the plain batch is already no staler than batches of {} events ({:.4})",
                    self.reference_batch, self.reference_staleness
                ),
                RefineReason::ReachesReference => format!(
                    "the fewest chunks within {TIME_BUDGET}x the plain batch's time whose staleness reaches batches of {} events ({:.4})",
                    self.reference_batch, self.reference_staleness
                ),
                RefineReason::StopsPaying { next: Some(next) } => format!(
                    "no count within {TIME_BUDGET}x the plain batch's time reaches the staleness of batches of {} events ({:.4}); refine {next} would add more of the time headroom than it removes of the staleness gap",
                    self.reference_batch, self.reference_staleness
                ),
                RefineReason::StopsPaying { next: None } => format!(
                    "no count within {TIME_BUDGET}x the plain batch's time reaches the staleness of batches of {} events ({:.4}); it is the most chunks within that time",
                    self.reference_batch, self.reference_staleness
                ),
            }
        )?;
        writeln!(
            out,
            "{:>8} {:>10} {:>10}  within {TIME_BUDGET}x",
            "refine", "time/plain", "staleness"
        )?;
        for c in &self.refine_candidates {
            let mark = if c.refine == self.refine { "  <- chosen" } else { "" };
            let within = if c.within_budget { "yes" } else { "no" };
            writeln!(
                out,
                "{:>8} {:>10.3} {:>10.4}  {within}{mark}",
                c.refine, c.time_vs_plain, c.staleness
            )?;
        }
        writeln!(
            out,
            "(plain step {:.4} s = {:.4} s fixed + {:.3e} s per event)",
            self.plain_seconds_per_batch, self.step_overhead_seconds, self.seconds_per_event
        )?;
        writeln!(
            out,
            "\nWindow {}: the lowest cross-shard ratio among the windows within {}% of the least predicted epoch time at refine {}",
            self.window,
            WINDOW_TOLERANCE * 100.0,
            self.refine
        )?;
        writeln!(
            out,
            "{:>8} {:>11} {:>9} {:>10} {:>10} {:>9} {:>9} {:>10}",
            "window", "cross-shard", "imbalance", "nodes/win", "epoch s", "compute", "sync", "reconcile"
        )?;
        for c in &self.window_candidates {
            let (s, p) = (&c.sample, &c.predicted);
            let mark = if s.window == self.window { "  <- chosen" } else { "" };
            writeln!(
                out,
                "{:>8} {:>11.4} {:>9.3} {:>10.1} {:>10.4} {:>9.4} {:>9.4} {:>10.4}{mark}",
                s.window,
                s.cross_shard_ratio,
                s.imbalance,
                s.nodes_per_window,
                p.epoch_seconds,
                p.compute_seconds,
                p.sync_seconds,
                p.reconcile_seconds
            )?;
        }
        Ok(())
    }
}

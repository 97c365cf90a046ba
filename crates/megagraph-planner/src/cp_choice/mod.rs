//! [`explain_cp_mode`]: why the best plan's context groups attend with the ring or with
//! Ulysses, in words, against the same layout in the other mode.

use crate::cost::CostModel;
use crate::memory::{MemoryBreakdown, format_bytes};
use crate::mesh::CandidateMesh;
use crate::plan::Plan;
use crate::report::{RejectReason, Rejected};
use crate::search_options::SearchOptions;
use megagraph_layout::CpMode;
use std::fmt::Write;

/// Why `best` uses its context mode: nothing to choose at `cp = 1`, the mode asked for in
/// `options`, the heads constraint, the edge encoding's dense bias (ring only), or how its exchange, step time and memory compare with
/// the same layout in the other mode (found among `candidates`, or out of memory among
/// `rejected`).
pub(crate) fn explain_cp_mode(
    model: &CostModel,
    options: &SearchOptions,
    best: &Plan,
    candidates: &[(Plan, Vec<MemoryBreakdown>)],
    rejected: &[Rejected],
) -> String {
    let layout = &best.layout;
    let mode = layout.cp_mode;
    if layout.cp <= 1 {
        return format!("{mode}: cp = 1, no context parallelism to choose a mode for");
    }
    let mesh = CandidateMesh::of(layout);
    let chosen = *model.candidate(mesh).context_exchange();
    if let Some(asked) = options.cp_mode {
        return format!("{asked}: asked for (cp_mode = {asked}); {}", chosen.describe());
    }
    let heads = model.shape().heads;
    if mode == CpMode::Ring && !heads.is_multiple_of(layout.cp) {
        return format!(
            "ring: heads {heads} not divisible by cp {}, so Ulysses cannot split them; {}",
            layout.cp,
            chosen.describe()
        );
    }
    if mode == CpMode::Ring && model.shape().edge_feature_dim > 0 {
        return format!(
            "ring: the edge encoding's dense bias stays on the ring's ranks (each computes its rows), and Ulysses would have to send it; {}",
            chosen.describe()
        );
    }
    let other_mode = match mode {
        CpMode::Ring => CpMode::Ulysses,
        CpMode::Ulysses => CpMode::Ring,
    };
    let other_mesh = CandidateMesh {
        cp_mode: other_mode,
        ..mesh
    };
    let other = *model.candidate(other_mesh).context_exchange();
    let mut text = format!(
        "{mode}: {} against {other_mode}'s {}",
        chosen.describe(),
        other.describe()
    );
    let predicted = &best.predicted;
    if let Some((plan, _)) = candidates
        .iter()
        .find(|(plan, _)| CandidateMesh::of(&plan.layout) == other_mesh)
    {
        let theirs = &plan.predicted;
        // Writing to a String cannot fail.
        let _ = if theirs.step_seconds > predicted.step_seconds {
            write!(
                text,
                "; {:.4} s per step against {:.4} s with {other_mode}",
                predicted.step_seconds, theirs.step_seconds
            )
        } else {
            write!(
                text,
                "; {other_mode} is about as fast ({:.4} s per step against {:.4} s) but needs {} per device against {}",
                theirs.step_seconds,
                predicted.step_seconds,
                format_bytes(theirs.peak_bytes_per_device),
                format_bytes(predicted.peak_bytes_per_device)
            )
        };
    } else if let Some(RejectReason::OutOfMemory {
        needed_bytes,
        limit_bytes,
        breakdown,
        ..
    }) = rejected
        .iter()
        .find(|r| CandidateMesh::of(&r.config) == other_mesh)
        .map(|r| &r.reason)
    {
        let (term, bytes) = breakdown.largest();
        let _ = write!(
            text,
            "; {other_mode} would need {} per device, over the {} limit (largest: {term} {})",
            format_bytes(*needed_bytes),
            format_bytes(*limit_bytes),
            format_bytes(bytes)
        );
    }
    text
}

#[cfg(test)]
mod tests;

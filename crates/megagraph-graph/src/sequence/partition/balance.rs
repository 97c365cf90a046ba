//! The size bounds of a bisection's side 0 ([`Balance`]) and the weight that is measured
//! against them ([`side_weight`]).

use super::weighted::WeightedGraph;

/// Size bounds of side 0 (in node weight).
#[derive(Debug, Clone, Copy)]
pub(super) struct Balance {
    /// The ideal size.
    pub(super) target: usize,
    /// Smallest allowed size.
    pub(super) lo: usize,
    /// Largest allowed size.
    pub(super) hi: usize,
}

impl Balance {
    /// How far `size` is outside `[lo, hi]`.
    pub(super) fn violation(&self, size: usize) -> usize {
        self.lo.saturating_sub(size) + size.saturating_sub(self.hi)
    }

    /// The same bounds widened by `tol` on both sides.
    pub(super) fn widened(&self, tol: usize, total: usize) -> Balance {
        Balance {
            target: self.target,
            lo: self.lo.saturating_sub(tol),
            hi: (self.hi + tol).min(total),
        }
    }
}

/// Total node weight on side 0.
pub(super) fn side_weight(g: &WeightedGraph, side: &[u8]) -> usize {
    (0..g.len())
        .filter(|&v| side[v] == 0)
        .map(|v| g.node_weights[v] as usize)
        .sum()
}

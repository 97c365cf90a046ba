//! [`ContextExchange`]: what a context group sends per layer, and how long the rank waits for
//! it, under either context mode.
//!
//! For a micro-batch of `q` sequences of `b = S / cp` local rows, width `d` and `e` bytes per
//! element, with one attention block's compute `attn(b)` (one ring step: `b` queries over `b`
//! keys, all `H` heads):
//!
//! ```text
//! ring     fwd: cp - 1 steps, send(q 2 b d e) each (K, V), overlapped with attn_fwd(b)
//!          bwd: cp - 1 steps, send(q 4 b d e) each (K, V, dK, dV), overlapped with attn_bwd(b),
//!               then send(q 2 b d e) once (dK, dV go home to their owner), not overlapped
//! ulysses  fwd: 4 all-to-alls (q, k, v scatter the heads; the output comes back) of q b d e
//!          held per rank, (cp - 1) / cp of it sent; not overlapped
//!          bwd: 4 all-to-alls of their gradients, the same sizes
//! ```
//!
//! Both modes compute the same attention per rank: the ring `cp` blocks of `b x b` for `H`
//! heads, Ulysses `S x S` for `H / cp` heads, `cp b^2 H` scores either way; so the modes differ
//! only in what is exposed here (and in memory, see [`MemoryModel`](crate::memory::MemoryModel)).

use crate::cluster::LinkSpec;
use crate::comm::{all_to_all_seconds, point_to_point_seconds, ring_attention_seconds};
use crate::memory::format_bytes;
use crate::stage_pass::StagePass;
use megagraph_layout::CpMode;

/// All-to-alls of one layer's Ulysses attention, forward (and as many backward).
pub const ULYSSES_ALL_TO_ALLS_PER_LAYER: usize = 4;

/// One layer's context-parallel communication on one rank, per micro-batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContextExchange {
    /// The mode.
    pub mode: CpMode,
    /// Messages (ring steps or all-to-alls) per layer forward; the backward has as many.
    pub messages_per_pass: usize,
    /// Bytes one rank sends per forward message.
    pub forward_bytes: f64,
    /// Bytes one rank sends per backward message.
    pub backward_bytes: f64,
    /// Bytes one rank sends once per layer after the backward's last step: the ring returns the
    /// finished key and value gradients to their owner (`2 q b d e`); nothing under Ulysses.
    pub return_bytes: f64,
    /// Seconds per layer the rank waits for the exchange beyond its attention compute.
    pub exposed: StagePass,
}

/// The sizes and link of one candidate's context group, for [`ContextExchange::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContextGroup {
    /// Ranks of the group (`cp`).
    pub ranks: usize,
    /// Bytes of one micro-batch's `[q, b, d]` activation of one rank (`q b d e`).
    pub block_bytes: f64,
    /// Seconds of one attention block (forward, backward): one ring step's compute.
    pub block_compute: StagePass,
    /// The group's slowest link.
    pub link: LinkSpec,
}

impl ContextExchange {
    /// The exchange of `group` under `mode`; nothing without context parallelism (`cp = 1`).
    pub fn new(mode: CpMode, group: &ContextGroup) -> Self {
        let none = Self {
            mode,
            messages_per_pass: 0,
            forward_bytes: 0.0,
            backward_bytes: 0.0,
            return_bytes: 0.0,
            exposed: StagePass::default(),
        };
        if group.ranks <= 1 {
            return none;
        }
        let cp = group.ranks as f64;
        match mode {
            CpMode::Ring => {
                let (forward_bytes, backward_bytes) = (2.0 * group.block_bytes, 4.0 * group.block_bytes);
                let return_bytes = 2.0 * group.block_bytes;
                let exposed = |compute: f64, bytes: f64| {
                    let comm = point_to_point_seconds(bytes, &group.link);
                    (ring_attention_seconds(group.ranks, compute, comm) - cp * compute).max(0.0)
                };
                // the return hop follows the last block's compute, so nothing hides it
                let returned = point_to_point_seconds(return_bytes, &group.link);
                Self {
                    messages_per_pass: group.ranks - 1,
                    forward_bytes,
                    backward_bytes,
                    return_bytes,
                    exposed: StagePass {
                        forward: exposed(group.block_compute.forward, forward_bytes),
                        backward: exposed(group.block_compute.backward, backward_bytes) + returned,
                    },
                    ..none
                }
            }
            CpMode::Ulysses => {
                let all_to_alls = ULYSSES_ALL_TO_ALLS_PER_LAYER as f64
                    * all_to_all_seconds(group.block_bytes, group.ranks, &group.link);
                let sent = (cp - 1.0) / cp * group.block_bytes;
                Self {
                    messages_per_pass: ULYSSES_ALL_TO_ALLS_PER_LAYER,
                    forward_bytes: sent,
                    backward_bytes: sent,
                    exposed: StagePass {
                        forward: all_to_alls,
                        backward: all_to_alls,
                    },
                    ..none
                }
            }
        }
    }

    /// Bytes one rank sends per layer and micro-batch, forward and backward.
    pub fn bytes_per_layer(&self) -> f64 {
        self.messages_per_pass as f64 * (self.forward_bytes + self.backward_bytes) + self.return_bytes
    }

    /// The exchange in words, e.g. `4 all-to-alls of 1.2 MB per layer forward (0.31 ms
    /// exposed forward + backward)` or `3 ring steps of 2.4 MB ...`.
    pub fn describe(&self) -> String {
        let what = match self.mode {
            CpMode::Ring => "ring steps",
            CpMode::Ulysses => "all-to-alls",
        };
        format!(
            "{} {what} of {} per layer forward ({:.3} ms exposed forward + backward)",
            self.messages_per_pass,
            format_bytes(self.forward_bytes.round() as u64),
            self.exposed.total() * 1e3
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkSpec = LinkSpec {
        bandwidth_bytes_per_second: 100.0,
        latency_seconds: 0.5,
    };

    fn group(ranks: usize, compute: f64) -> ContextGroup {
        ContextGroup {
            ranks,
            block_bytes: 1000.0,
            block_compute: StagePass {
                forward: compute,
                backward: 2.0 * compute,
            },
            link: LINK,
        }
    }

    #[test]
    fn ulysses_sends_four_all_to_alls_each_way() {
        let exchange = ContextExchange::new(CpMode::Ulysses, &group(4, 1.0));
        // each all-to-all: 3 * 0.5 s latency + 3/4 * 1000 B / 100 B/s
        let one = 1.5 + 7.5;
        assert_eq!(exchange.messages_per_pass, 4);
        assert!((exchange.exposed.forward - 4.0 * one).abs() < 1e-12);
        assert!((exchange.exposed.backward - 4.0 * one).abs() < 1e-12);
        assert!((exchange.forward_bytes - 750.0).abs() < 1e-12);
        assert!((exchange.bytes_per_layer() - 8.0 * 750.0).abs() < 1e-9);
        assert!(
            exchange.describe().starts_with("4 all-to-alls of 750 B"),
            "{}",
            exchange.describe()
        );
    }

    #[test]
    fn the_ring_exposes_what_compute_does_not_hide() {
        // K, V: 2000 B -> 0.5 + 20 s per step, against 1 s of compute: 3 steps expose 19.5 each.
        let exchange = ContextExchange::new(CpMode::Ring, &group(4, 1.0));
        assert_eq!(exchange.messages_per_pass, 3);
        assert!((exchange.exposed.forward - 3.0 * 19.5).abs() < 1e-9);
        // backward: K, V, dK, dV 4000 B -> 40.5 s per step against 2 s, then dK, dV go home
        // (2000 B -> 20.5 s, after the last compute)
        assert!((exchange.exposed.backward - (3.0 * 38.5 + 20.5)).abs() < 1e-9);
        // 3 steps of 2000 B forward and 4000 B backward, and the 2000 B return
        assert!((exchange.bytes_per_layer() - (3.0 * 6000.0 + 2000.0)).abs() < 1e-9);
        // compute long enough hides all but the return
        let hidden = ContextExchange::new(CpMode::Ring, &group(4, 100.0));
        assert_eq!(hidden.exposed.forward, 0.0);
        assert!((hidden.exposed.backward - 20.5).abs() < 1e-9);
        assert!(
            hidden.describe().starts_with("3 ring steps of 2.0 kB"),
            "{}",
            hidden.describe()
        );
    }

    #[test]
    fn one_rank_exchanges_nothing() {
        for mode in CpMode::ALL {
            let exchange = ContextExchange::new(mode, &group(1, 1.0));
            assert_eq!(exchange.bytes_per_layer(), 0.0);
            assert_eq!(exchange.exposed, StagePass::default());
        }
    }
}

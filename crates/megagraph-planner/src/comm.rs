//! Communication and schedule time formulas (alpha-beta model).

use crate::cluster::LinkSpec;

/// Seconds of a ring all-reduce of `bytes` over `ranks` ranks whose slowest hop is `link`:
/// `2 (n - 1) / n * bytes / bandwidth + 2 (n - 1) * latency`; 0 for one rank.
pub fn ring_all_reduce_seconds(bytes: f64, ranks: usize, link: &LinkSpec) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = ranks as f64;
    2.0 * (n - 1.0) / n * bytes / link.bandwidth_bytes_per_second
        + 2.0 * (n - 1.0) * link.latency_seconds
}

/// Seconds of an all-to-all over `ranks` ranks that each hold `bytes` (one part of
/// `bytes / n` for every rank, its own included) over `link`: every rank sends its `n - 1`
/// other parts, one message each, `(n - 1) * latency + (n - 1) / n * bytes / bandwidth`; 0 for
/// one rank.
pub fn all_to_all_seconds(bytes: f64, ranks: usize, link: &LinkSpec) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = ranks as f64;
    (n - 1.0) * link.latency_seconds + (n - 1.0) / n * bytes / link.bandwidth_bytes_per_second
}

/// Seconds of one point-to-point message of `bytes` over `link`.
pub fn point_to_point_seconds(bytes: f64, link: &LinkSpec) -> f64 {
    link.transfer_seconds(bytes)
}

/// Seconds of ring attention over `steps` blocks: each of the first `steps - 1` steps computes a
/// block while the next K/V block travels (`max(compute, comm)`), the last step only computes.
pub fn ring_attention_seconds(steps: usize, compute_per_step: f64, comm_per_step: f64) -> f64 {
    if steps <= 1 {
        return compute_per_step;
    }
    (steps - 1) as f64 * compute_per_step.max(comm_per_step) + compute_per_step
}

/// Seconds of a 1F1B (or GPipe) pipeline of `micro_batches` micro-batches whose stages take
/// `stage_seconds` (forward plus backward) per micro-batch:
/// `(m - 1) * max stage + sum of stages`, the textbook estimate. The cost model simulates the
/// schedule instead ([`one_forward_one_backward_seconds`]), which gives this for equal stages
/// and follows unequal forward and backward passes.
///
/// Kept as the reference the tests hold the textbook formula to.
///
/// [`one_forward_one_backward_seconds`]: crate::schedule::one_forward_one_backward_seconds
#[cfg(test)]
pub(crate) fn pipeline_seconds(stage_seconds: &[f64], micro_batches: usize) -> f64 {
    let max = stage_seconds.iter().copied().fold(0.0, f64::max);
    let sum: f64 = stage_seconds.iter().sum();
    micro_batches.saturating_sub(1) as f64 * max + sum
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkSpec = LinkSpec {
        bandwidth_bytes_per_second: 100.0,
        latency_seconds: 0.5,
    };

    #[test]
    fn all_reduce_follows_the_ring_formula() {
        assert_eq!(ring_all_reduce_seconds(1000.0, 1, &LINK), 0.0);
        // n = 4: 2 * 3/4 * 1000 / 100 + 2 * 3 * 0.5.
        assert!((ring_all_reduce_seconds(1000.0, 4, &LINK) - (15.0 + 3.0)).abs() < 1e-12);
        assert!((point_to_point_seconds(100.0, &LINK) - 1.5).abs() < 1e-12);
    }

    #[test]
    fn all_to_all_sends_all_but_the_own_part() {
        assert_eq!(all_to_all_seconds(1000.0, 1, &LINK), 0.0);
        // n = 4: 3 messages of 250 bytes: 3 * 0.5 + 750 / 100.
        assert!((all_to_all_seconds(1000.0, 4, &LINK) - (1.5 + 7.5)).abs() < 1e-12);
        // n = 2: 1 message of 500 bytes.
        assert!((all_to_all_seconds(1000.0, 2, &LINK) - (0.5 + 5.0)).abs() < 1e-12);
    }

    #[test]
    fn ring_attention_hides_communication_under_compute() {
        assert_eq!(ring_attention_seconds(1, 2.0, 100.0), 2.0);
        assert_eq!(ring_attention_seconds(4, 2.0, 1.0), 8.0);
        assert_eq!(ring_attention_seconds(4, 2.0, 3.0), 11.0);
    }

    #[test]
    fn pipeline_is_fill_plus_steady_state() {
        assert_eq!(pipeline_seconds(&[1.0, 3.0, 2.0], 4), 3.0 * 3.0 + 6.0);
        assert_eq!(pipeline_seconds(&[5.0], 1), 5.0);
    }
}

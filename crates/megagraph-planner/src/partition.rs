//! [`optimal_partition`]: the exact best split of `L` layers into `pp` contiguous, non-empty
//! pipeline stages.
//!
//! A dynamic program over layer boundaries: `best[s][i]`, the smallest possible slowest-stage
//! time of stages `s..pp` covering layers `i..L`, is
//! `min over j of max(cost(s, i, j), best[s + 1][j])`, where `cost(s, i, j)` is stage `s` holding
//! layers `i..j` (`None` when that stage would not fit in memory). A second pass over the same
//! boundaries minimizes the sum of stage times among the splits that reach the smallest slowest
//! stage (the pipeline's fill and drain). `O(pp * L^2)` cost evaluations per pass.

/// A split of layers into stages.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// Layers per stage.
    pub stage_layers: Vec<usize>,
    /// The slowest stage's cost.
    pub bottleneck: f64,
    /// The sum of stage costs.
    pub total: f64,
}

/// The split of `layers` layers into `stages` contiguous non-empty stages that minimizes the
/// largest `cost(stage, first_layer, end_layer)` and, among those, the sum of costs; `None` when
/// `stages == 0`, `stages > layers`, or no split has every stage feasible (`Some` cost).
pub fn optimal_partition(
    layers: usize,
    stages: usize,
    cost: impl Fn(usize, usize, usize) -> Option<f64>,
) -> Option<Partition> {
    if stages == 0 || stages > layers {
        return None;
    }
    // Stage s covers layers i..j with s <= i and j <= layers - (stages - s - 1): enough layers
    // remain for the later stages.
    let end_max = |s: usize| layers - (stages - s - 1);
    let mut best = vec![vec![f64::INFINITY; layers + 1]; stages + 1];
    best[stages][layers] = 0.0;
    for s in (0..stages).rev() {
        for i in s..end_max(s) {
            let mut value = f64::INFINITY;
            for (j, &rest) in best[s + 1]
                .iter()
                .enumerate()
                .take(end_max(s) + 1)
                .skip(i + 1)
            {
                if let Some(c) = cost(s, i, j).filter(|_| rest.is_finite()) {
                    value = value.min(c.max(rest));
                }
            }
            best[s][i] = value;
        }
    }
    let bottleneck = best[0][0];
    if !bottleneck.is_finite() {
        return None;
    }

    // Least total among splits whose every stage is within the bottleneck (with a relative
    // tolerance for rounding).
    let limit = bottleneck * (1.0 + 1e-12) + f64::MIN_POSITIVE;
    let mut total = vec![vec![f64::INFINITY; layers + 1]; stages + 1];
    let mut next = vec![vec![0usize; layers + 1]; stages + 1];
    total[stages][layers] = 0.0;
    for s in (0..stages).rev() {
        for i in s..end_max(s) {
            for j in i + 1..=end_max(s) {
                let rest = total[s + 1][j];
                if let Some(c) = cost(s, i, j).filter(|&c| c <= limit && rest.is_finite())
                    && c + rest < total[s][i]
                {
                    total[s][i] = c + rest;
                    next[s][i] = j;
                }
            }
        }
    }
    let mut stage_layers = Vec::with_capacity(stages);
    let mut i = 0;
    for row in next.iter().take(stages) {
        let j = row[i];
        stage_layers.push(j - i);
        i = j;
    }
    Some(Partition {
        stage_layers,
        bottleneck,
        total: total[0][0],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every composition of `layers` into `stages` positive parts.
    fn compositions(layers: usize, stages: usize) -> Vec<Vec<usize>> {
        if stages == 1 {
            return vec![vec![layers]];
        }
        (1..=layers - (stages - 1))
            .flat_map(|first| {
                compositions(layers - first, stages - 1)
                    .into_iter()
                    .map(move |mut rest| {
                        rest.insert(0, first);
                        rest
                    })
            })
            .collect()
    }

    fn brute_force(
        layers: usize,
        stages: usize,
        cost: &impl Fn(usize, usize, usize) -> Option<f64>,
    ) -> Option<(f64, f64)> {
        compositions(layers, stages)
            .into_iter()
            .filter_map(|split| {
                let mut start = 0;
                let mut costs = Vec::new();
                for (s, &k) in split.iter().enumerate() {
                    costs.push(cost(s, start, start + k)?);
                    start += k;
                }
                Some((
                    costs.iter().copied().fold(0.0, f64::max),
                    costs.iter().sum::<f64>(),
                ))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)))
    }

    /// A small deterministic generator.
    fn next(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 33) % 1000) as f64 / 100.0 + 0.1
    }

    #[test]
    fn matches_brute_force_on_heterogeneous_layers() {
        let mut state = 7u64;
        for trial in 0..60 {
            let layers = 2 + trial % 8;
            let stages = 1 + trial % layers.min(5);
            let layer_cost: Vec<f64> = (0..layers).map(|_| next(&mut state)).collect();
            let stage_overhead: Vec<f64> = (0..stages).map(|_| next(&mut state)).collect();
            let memory_per_layer: Vec<f64> = (0..layers).map(|_| next(&mut state)).collect();
            let in_flight: Vec<f64> = (0..stages).map(|s| (stages - s) as f64).collect();
            let limit = 12.0 + next(&mut state) * 3.0;
            let cost = |s: usize, i: usize, j: usize| {
                let memory =
                    in_flight[s] * memory_per_layer[i..j].iter().sum::<f64>() / stages as f64;
                (memory <= limit).then(|| {
                    stage_overhead[s] * f64::from(s == 0) + layer_cost[i..j].iter().sum::<f64>()
                })
            };
            let expected = brute_force(layers, stages, &cost);
            let found = optimal_partition(layers, stages, cost);
            match (expected, found) {
                (None, None) => {}
                (Some((bottleneck, total)), Some(partition)) => {
                    assert!(
                        (partition.bottleneck - bottleneck).abs() < 1e-9,
                        "trial {trial}"
                    );
                    assert!((partition.total - total).abs() < 1e-9, "trial {trial}");
                    assert_eq!(partition.stage_layers.len(), stages);
                    assert_eq!(partition.stage_layers.iter().sum::<usize>(), layers);
                    // The reported split has the reported costs.
                    let mut start = 0;
                    let mut max = 0.0f64;
                    for (s, &k) in partition.stage_layers.iter().enumerate() {
                        max = max.max(cost(s, start, start + k).expect("feasible"));
                        start += k;
                    }
                    assert!((max - bottleneck).abs() < 1e-9);
                }
                (expected, found) => {
                    panic!("trial {trial}: brute force {expected:?}, DP {found:?}")
                }
            }
        }
    }

    #[test]
    fn balances_a_heavy_first_stage() {
        // The embedding costs two layers: 16 layers on 2 stages -> 7 + 9 (9 vs 9) beats 8 + 8
        // (10 vs 8).
        let cost =
            |s: usize, i: usize, j: usize| Some((j - i) as f64 + if s == 0 { 2.0 } else { 0.0 });
        let partition = optimal_partition(16, 2, cost).unwrap();
        assert_eq!(partition.stage_layers, vec![7, 9]);
        assert_eq!(partition.bottleneck, 9.0);
        assert!(optimal_partition(3, 4, cost).is_none());
        assert!(optimal_partition(4, 2, |_, _, _| None).is_none());
    }
}

//! The 1F1B (one forward, one backward) pipeline schedule.
//!
//! Stage `i` of `pp` first runs `min(pp - i - 1, M)` warm-up forwards, then alternates one
//! forward and one backward until every micro-batch went forward, then drains the remaining
//! backwards. A stage therefore holds at most `pp - i` micro-batches in flight (their saved
//! activations), instead of `M` with a fill-then-drain (GPipe) schedule; the last stage runs
//! each micro-batch's backward right after its forward.

/// One action of a stage's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipelineAction {
    /// Forward pass of the micro-batch with this index.
    Forward(usize),
    /// Backward pass of the micro-batch with this index.
    Backward(usize),
}

/// The 1F1B schedule of `stage` in a pipeline of `stages` stages over `micro_batches`
/// micro-batches: every micro-batch appears once as a forward and later once as a backward, in
/// increasing micro-batch order.
///
/// Empty when `stage >= stages`.
pub fn one_forward_one_backward(
    stage: usize,
    stages: usize,
    micro_batches: usize,
) -> Vec<PipelineAction> {
    if stage >= stages {
        return Vec::new();
    }
    let warmup = (stages - stage - 1).min(micro_batches);
    let steady = micro_batches - warmup;
    let mut actions = Vec::with_capacity(2 * micro_batches);
    actions.extend((0..warmup).map(PipelineAction::Forward));
    for i in 0..steady {
        actions.push(PipelineAction::Forward(warmup + i));
        actions.push(PipelineAction::Backward(i));
    }
    actions.extend((steady..micro_batches).map(PipelineAction::Backward));
    actions
}

/// The largest number of micro-batches a schedule holds between their forward and backward.
pub fn max_in_flight(actions: &[PipelineAction]) -> usize {
    let mut in_flight = 0usize;
    let mut max = 0;
    for action in actions {
        match action {
            PipelineAction::Forward(_) => {
                in_flight += 1;
                max = max.max(in_flight);
            }
            PipelineAction::Backward(_) => in_flight = in_flight.saturating_sub(1),
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use PipelineAction::{Backward, Forward};

    #[test]
    fn last_stage_alternates_and_first_stage_warms_up() {
        assert_eq!(
            one_forward_one_backward(1, 2, 3),
            vec![
                Forward(0),
                Backward(0),
                Forward(1),
                Backward(1),
                Forward(2),
                Backward(2)
            ]
        );
        assert_eq!(
            one_forward_one_backward(0, 3, 3),
            vec![
                Forward(0),
                Forward(1),
                Forward(2),
                Backward(0),
                Backward(1),
                Backward(2)
            ]
        );
        assert_eq!(
            one_forward_one_backward(0, 2, 3),
            vec![
                Forward(0),
                Forward(1),
                Backward(0),
                Forward(2),
                Backward(1),
                Backward(2)
            ]
        );
        assert!(one_forward_one_backward(2, 2, 3).is_empty());
    }

    #[test]
    fn every_micro_batch_once_and_in_flight_bounded() {
        for stages in 1..6 {
            for micro in 1..9 {
                for stage in 0..stages {
                    let actions = one_forward_one_backward(stage, stages, micro);
                    let forwards: Vec<usize> = actions
                        .iter()
                        .filter_map(|a| match a {
                            Forward(m) => Some(*m),
                            Backward(_) => None,
                        })
                        .collect();
                    let backwards: Vec<usize> = actions
                        .iter()
                        .filter_map(|a| match a {
                            Backward(m) => Some(*m),
                            Forward(_) => None,
                        })
                        .collect();
                    assert_eq!(forwards, (0..micro).collect::<Vec<_>>());
                    assert_eq!(backwards, (0..micro).collect::<Vec<_>>());
                    for m in 0..micro {
                        let f = actions.iter().position(|a| *a == Forward(m));
                        let b = actions.iter().position(|a| *a == Backward(m));
                        assert!(f < b, "stage {stage}/{stages}, micro {m}: {actions:?}");
                    }
                    let bound = (stages - stage).min(micro);
                    assert_eq!(max_in_flight(&actions), bound, "{stage}/{stages} {micro}");
                }
            }
        }
    }

    /// Runs every stage's schedule against the message dependencies (a forward needs the
    /// previous stage's forward, a backward the next stage's backward) and checks that some
    /// stage can always move: the schedule cannot deadlock.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn schedules_never_deadlock() {
        for stages in 1..6 {
            for micro in 1..9 {
                let schedules: Vec<Vec<PipelineAction>> = (0..stages)
                    .map(|s| one_forward_one_backward(s, stages, micro))
                    .collect();
                let mut cursor = vec![0usize; stages];
                let mut forward_done = vec![vec![false; micro]; stages];
                let mut backward_done = vec![vec![false; micro]; stages];
                loop {
                    let mut moved = false;
                    for s in 0..stages {
                        let Some(&action) = schedules[s].get(cursor[s]) else {
                            continue;
                        };
                        let ready = match action {
                            Forward(m) => s == 0 || forward_done[s - 1][m],
                            Backward(m) => s + 1 == stages || backward_done[s + 1][m],
                        };
                        if ready {
                            match action {
                                Forward(m) => forward_done[s][m] = true,
                                Backward(m) => backward_done[s][m] = true,
                            }
                            cursor[s] += 1;
                            moved = true;
                        }
                    }
                    if !moved {
                        break;
                    }
                }
                for s in 0..stages {
                    assert_eq!(cursor[s], 2 * micro, "stage {s}/{stages}, {micro} micro");
                }
            }
        }
    }
}

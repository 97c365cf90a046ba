//! [`WarmupCosine`]: the learning-rate schedule of a run, indexed by step, and
//! [`WarmupCosineLr`], the same schedule as a burn-train learning-rate scheduler.

use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::Backend;

/// Learning rate with linear warm-up then cosine decay to `min_ratio * peak`, indexed by step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmupCosine {
    /// Peak learning rate, reached at the end of warm-up.
    pub peak: f64,
    /// Steps of linear warm-up.
    pub warmup_steps: usize,
    /// Total number of steps.
    pub total_steps: usize,
    /// Final learning rate as a fraction of `peak`.
    pub min_ratio: f64,
}

impl WarmupCosine {
    /// Learning rate of step `step` (from 0).
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.peak * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
    }
}

impl WarmupCosine {
    /// This schedule as a burn-train scheduler for a `Learner`: its `n`-th step (from 0) gives
    /// [`at(n)`](Self::at), the rate the
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) uses at its step `n`.
    pub fn scheduler(self) -> WarmupCosineLr {
        WarmupCosineLr {
            schedule: self,
            step: 0,
        }
    }
}

/// [`WarmupCosine`] as burn-train's [`LrScheduler`] (made by [`WarmupCosine::scheduler`]); its
/// record is the number of steps taken, so a resumed learner continues the schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmupCosineLr {
    schedule: WarmupCosine,
    step: usize,
}

impl LrScheduler for WarmupCosineLr {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> f64 {
        let lr = self.schedule.at(self.step);
        self.step += 1;
        lr
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, record: usize) -> Self {
        self.step = record;
        self
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn the_burn_scheduler_steps_through_the_schedule_and_resumes_from_its_record() {
        let peak = 1e-3 * (1.0 + rand::random::<f64>());
        let s = WarmupCosine { peak, warmup_steps: 3, total_steps: 20, min_ratio: 0.05 };
        let mut scheduler = s.scheduler();
        let first: Vec<f64> = (0..7).map(|_| LrScheduler::step(&mut scheduler)).collect();
        assert_eq!(first, (0..7).map(|n| s.at(n)).collect::<Vec<_>>());
        let record = scheduler.to_record::<Flex>();
        let mut resumed = s.scheduler().load_record::<Flex>(record);
        for n in 7..25 {
            assert_eq!(LrScheduler::step(&mut resumed), s.at(n));
        }
    }

    #[test]
    fn warms_up_then_decays_to_the_floor() {
        let s = WarmupCosine { peak: 1.0, warmup_steps: 4, total_steps: 104, min_ratio: 0.1 };
        assert!((s.at(0) - 0.25).abs() < 1e-12);
        assert!((s.at(3) - 1.0).abs() < 1e-12);
        assert!((s.at(4) - 1.0).abs() < 1e-12);
        assert!((s.at(54) - 0.55).abs() < 1e-12);
        assert!((s.at(104) - 0.1).abs() < 1e-12);
        assert!((s.at(500) - 0.1).abs() < 1e-12);
        assert!((1..104).all(|i| s.at(i + 4) <= s.at(i + 3) + 1e-15));
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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

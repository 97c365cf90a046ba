//! [`StagePass`]: the seconds of one micro-batch's passes on one stage, which the schedule
//! simulates and the machine sharing scales.

/// Seconds of one micro-batch's forward and backward pass on one stage, each including the
/// transfer the stage makes at its end (activations forward, gradients backward).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StagePass {
    /// Forward pass seconds.
    pub forward: f64,
    /// Backward pass seconds.
    pub backward: f64,
}

impl StagePass {
    /// Forward plus backward seconds.
    pub fn total(&self) -> f64 {
        self.forward + self.backward
    }
}

impl std::ops::Add for StagePass {
    type Output = Self;

    /// Forward plus forward, backward plus backward seconds.
    fn add(self, other: Self) -> Self {
        Self {
            forward: self.forward + other.forward,
            backward: self.backward + other.backward,
        }
    }
}

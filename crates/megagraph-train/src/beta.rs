//! [`BetaTuner`]: TorchGT's adaptive `β` of elastic computation reformation
//! ([`ReformThreshold::Beta`](megagraph_graph::sequence::ReformThreshold)), driven by how fast the
//! training loss falls.

use std::collections::VecDeque;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// The `β` levels the tuner steps through (TorchGT's list; it starts at `1`).
pub const BETA_LEVELS: [f64; 6] = [0.0, 1.0, 1.5, 5.0, 7.0, 10.0];

/// Epochs of loss-decrease rates compared before `β` moves.
const WINDOW: usize = 5;

/// Chooses `β` once per epoch from the loss-decrease rate, as TorchGT does: the loss is smoothed
/// (`0.9 · old + 0.1 · new`); from epoch 5 on the rate is `|Δ smoothed loss| / epoch seconds`,
/// kept for the last five epochs; from epoch 9 on, when those rates never fell, `β` moves one
/// level up (more pairs become dense tiles: faster steps), and when they never rose it moves one
/// level down (the loss slows: more exact edges).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BetaTuner {
    #[serde(deserialize_with = "level_in_range")]
    level: usize,
    smoothed: Option<f64>,
    rates: VecDeque<f64>,
}

impl Default for BetaTuner {
    fn default() -> Self {
        Self {
            level: 1,
            smoothed: None,
            rates: VecDeque::from(vec![0.0; WINDOW]),
        }
    }
}

/// Reads a level of [`BETA_LEVELS`], refusing one past its end (a corrupt checkpoint).
fn level_in_range<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let level = usize::deserialize(deserializer)?;
    if level < BETA_LEVELS.len() {
        Ok(level)
    } else {
        Err(D::Error::custom(format!("β level {level} is past the last of {} levels", BETA_LEVELS.len())))
    }
}

impl BetaTuner {
    /// The current `β`.
    pub fn beta(&self) -> f64 {
        BETA_LEVELS[self.level]
    }

    /// Records epoch `epoch` (1-based) that ended with training loss `loss` after `seconds`,
    /// and returns the `β` of the next epoch.
    pub fn observe(&mut self, epoch: usize, loss: f64, seconds: f64) -> f64 {
        let Some(old) = self.smoothed else {
            self.smoothed = Some(loss);
            return self.beta();
        };
        let smoothed = 0.9 * old + 0.1 * loss;
        self.smoothed = Some(smoothed);
        if epoch >= 5 {
            self.rates.pop_front();
            self.rates.push_back((smoothed - old).abs() / seconds.max(f64::MIN_POSITIVE));
            if epoch >= 9 {
                let pairs: Vec<(f64, f64)> = self.rates.iter().zip(self.rates.iter().skip(1)).map(|(&a, &b)| (a, b)).collect();
                if pairs.iter().all(|&(a, b)| b >= a) {
                    self.level = (self.level + 1).min(BETA_LEVELS.len() - 1);
                }
                if pairs.iter().all(|&(a, b)| b <= a) {
                    self.level = self.level.saturating_sub(1);
                }
            }
        }
        self.beta()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `β` after each epoch for the losses `losses` (one second per epoch).
    fn run(losses: impl IntoIterator<Item = f64>) -> Vec<f64> {
        let mut tuner = BetaTuner::default();
        losses.into_iter().enumerate().map(|(e, loss)| tuner.observe(e + 1, loss, 1.0)).collect()
    }

    #[test]
    fn beta_holds_until_epoch_9_then_follows_the_loss_decrease_rate() {
        // a loss falling faster and faster: the rates rise, β steps up from epoch 9 on
        let accelerating = run((0..12).map(|e| 10.0 - 0.05 * (e * e) as f64));
        assert!(accelerating[..8].iter().all(|&b| b == 1.0), "{accelerating:?}");
        assert_eq!(&accelerating[8..], &[1.5, 5.0, 7.0, 10.0]);
        // a loss that flattens: the rates fall, β steps down to 0 and stays
        let flattening = run((0..12).map(|e| 1.0 + 10.0 * 0.5f64.powi(e)));
        assert_eq!(&flattening[8..], &[0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn the_state_round_trips_through_json_and_a_level_past_the_last_is_refused() {
        let mut tuner = BetaTuner::default();
        for (e, loss) in (0..10).map(|e| 10.0 - 0.05 * (e * e) as f64).enumerate() {
            tuner.observe(e + 1, loss, 1.0);
        }
        let text = serde_json::to_string(&tuner).unwrap_or_else(|e| panic!("{e}"));
        let back: BetaTuner = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, tuner);
        assert_eq!(back.beta(), 5.0);
        let corrupt = text.replace("\"level\":3", "\"level\":6");
        assert_ne!(corrupt, text);
        let error = serde_json::from_str::<BetaTuner>(&corrupt).err().map(|e| e.to_string());
        assert!(error.as_ref().is_some_and(|e| e.contains("β level 6")), "{error:?}");
    }
}

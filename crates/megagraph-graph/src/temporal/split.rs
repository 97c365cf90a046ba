//! [`ChronologicalSplit`]: train / validation / test ranges of a time-sorted event stream.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::error::TemporalError;
use super::events::EventStream;

/// Fractions of the events in the training and validation parts; the test part is the rest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SplitFractions {
    /// Fraction of events (the earliest) for training. Default: 0.70.
    pub train: f64,
    /// Fraction of events (the next) for validation. Default: 0.15.
    pub valid: f64,
}

impl Default for SplitFractions {
    fn default() -> Self {
        Self {
            train: 0.70,
            valid: 0.15,
        }
    }
}

/// Event-index ranges of a chronological split: `train`, `valid` and `test` are consecutive
/// and together cover `0..events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChronologicalSplit {
    /// Training events.
    pub train: Range<usize>,
    /// Validation events.
    pub valid: Range<usize>,
    /// Test events.
    pub test: Range<usize>,
}

impl ChronologicalSplit {
    /// Splits `num_events` by index as TGL does: training ends at
    /// `floor(num_events * train)`, validation at `floor(num_events * (train + valid))`.
    /// Events with equal times may fall on both sides of a boundary.
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] unless both fractions are finite and non-negative and
    /// `train + valid <= 1`.
    pub fn new(
        num_events: usize,
        fractions: SplitFractions,
    ) -> Result<ChronologicalSplit, TemporalError> {
        let SplitFractions { train, valid } = fractions;
        for (field, value) in [("train fraction", train), ("valid fraction", valid)] {
            if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
                return Err(TemporalError::config(field, value, "must be in [0, 1]"));
            }
        }
        if train + valid > 1.0 {
            return Err(TemporalError::config(
                "train + valid fraction",
                train + valid,
                "must be at most 1",
            ));
        }
        let at = |f: f64| ((num_events as f64 * f).floor() as usize).min(num_events);
        let train_end = at(train);
        let valid_end = at(train + valid).max(train_end);
        Ok(ChronologicalSplit {
            train: 0..train_end,
            valid: train_end..valid_end,
            test: valid_end..num_events,
        })
    }

    /// The split given by TGL's `ext_roll` column (0 = train, 1 = validation, 2 = test).
    ///
    /// # Errors
    /// [`TemporalError::InvalidConfig`] naming the event whose roll is above 2 or smaller than
    /// its predecessor's (the parts must be consecutive).
    pub fn from_roll(roll: &[u8]) -> Result<ChronologicalSplit, TemporalError> {
        let mut ends = [0usize; 3];
        let mut previous = 0u8;
        for (event, &r) in roll.iter().enumerate() {
            if r > 2 || r < previous {
                return Err(TemporalError::config(
                    "ext_roll",
                    format!("{r} at event {event} (previous {previous})"),
                    "rolls must be 0, 1 or 2 and never decrease",
                ));
            }
            previous = r;
            for end in &mut ends[usize::from(r)..] {
                *end = event + 1;
            }
        }
        let [train_end, valid_end, test_end] = ends;
        Ok(ChronologicalSplit {
            train: 0..train_end,
            valid: train_end..valid_end,
            test: valid_end..test_end,
        })
    }

    /// Nodes that appear in validation or test events but in no training event (for inductive
    /// reporting), ascending.
    pub fn new_nodes(&self, stream: &EventStream) -> Vec<u32> {
        let mut seen_in_train = vec![false; stream.num_nodes()];
        let mut seen_later = vec![false; stream.num_nodes()];
        let (src, dst) = (stream.src(), stream.dst());
        for e in self.train.clone() {
            seen_in_train[src[e] as usize] = true;
            seen_in_train[dst[e] as usize] = true;
        }
        for e in self.train.end..self.test.end.min(stream.len()) {
            seen_later[src[e] as usize] = true;
            seen_later[dst[e] as usize] = true;
        }
        (0..stream.num_nodes() as u32)
            .filter(|&v| seen_later[v as usize] && !seen_in_train[v as usize])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fractions_split_like_tgl() {
        let s = ChronologicalSplit::new(157_474, SplitFractions::default()).unwrap();
        // int(157474 * 0.70) = 110231, int(157474 * 0.85) = 133852.
        assert_eq!(s.train, 0..110_231);
        assert_eq!(s.valid, 110_231..133_852);
        assert_eq!(s.test, 133_852..157_474);
        let s = ChronologicalSplit::new(
            10,
            SplitFractions {
                train: 0.5,
                valid: 0.5,
            },
        )
        .unwrap();
        assert_eq!((s.train, s.valid, s.test), (0..5, 5..10, 10..10));
    }

    #[test]
    fn invalid_fractions_are_rejected() {
        for (train, valid) in [(0.8, 0.3), (-0.1, 0.1), (f64::NAN, 0.1), (0.5, 1.5)] {
            let r = ChronologicalSplit::new(100, SplitFractions { train, valid });
            assert!(
                matches!(r, Err(TemporalError::InvalidConfig { .. })),
                "{train} {valid}"
            );
        }
    }

    #[test]
    fn roll_gives_consecutive_parts() {
        let s = ChronologicalSplit::from_roll(&[0, 0, 0, 1, 2, 2]).unwrap();
        assert_eq!((s.train, s.valid, s.test), (0..3, 3..4, 4..6));
        let s = ChronologicalSplit::from_roll(&[0, 0, 2]).unwrap();
        assert_eq!((s.train, s.valid, s.test), (0..2, 2..2, 2..3));
        assert!(ChronologicalSplit::from_roll(&[0, 1, 0]).is_err());
        assert!(ChronologicalSplit::from_roll(&[0, 3]).is_err());
    }

    #[test]
    fn new_nodes_are_those_unseen_in_training() {
        // Training: events 0..2 touch nodes 0, 1, 2; later events touch 2, 3, 4 and 1, 5.
        let stream = EventStream::new(
            7,
            vec![0, 1, 2, 4, 5],
            vec![1, 2, 3, 2, 1],
            vec![0.0, 1.0, 2.0, 3.0, 4.0],
            vec![0; 5],
        )
        .unwrap();
        let split = ChronologicalSplit {
            train: 0..2,
            valid: 2..4,
            test: 4..5,
        };
        assert_eq!(split.new_nodes(&stream), vec![3, 4, 5]);
    }
}

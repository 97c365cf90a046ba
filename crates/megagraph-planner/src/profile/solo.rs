//! [`SoloRatios`]: how much faster each part runs when its rank computes alone on the machine
//! (a measured profile's [`solo`](super::ProfileTable::solo) field; see [`crate::sharing`]).

use super::error::ProfileError;
use super::part::ProfiledPart;
use crate::stage_pass::StagePass;
use serde::{Deserialize, Serialize};

/// Seconds of a part's forward and backward passes computed alone, over their seconds with every
/// copy of the profile computing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassRatios {
    /// Forward pass ratio.
    pub forward: f64,
    /// Backward pass ratio.
    pub backward: f64,
}

impl PassRatios {
    /// Ratio 1 for both passes: alone as fast as with the others.
    pub const ONE: Self = Self {
        forward: 1.0,
        backward: 1.0,
    };

    /// `pass` with each of its times multiplied by its ratio.
    pub fn scale(&self, pass: StagePass) -> StagePass {
        StagePass {
            forward: self.forward * pass.forward,
            backward: self.backward * pass.backward,
        }
    }
}

/// How much faster every profiled part runs alone than with all the profile's copies
/// computing: the median over the ladder of each point's solo time over its concurrent time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoloRatios {
    /// Copies that computed at once for the concurrent times (at least 2).
    pub copies: usize,
    /// The embedding stage.
    pub embedding: PassRatios,
    /// One layer without its attention core.
    pub layer_dense: PassRatios,
    /// One attention block.
    pub attention: PassRatios,
    /// The head.
    pub head: PassRatios,
}

impl SoloRatios {
    /// The ratios of `part`.
    pub fn part(&self, part: ProfiledPart) -> PassRatios {
        match part {
            ProfiledPart::Embedding => self.embedding,
            ProfiledPart::LayerDense => self.layer_dense,
            ProfiledPart::Attention => self.attention,
            ProfiledPart::Head => self.head,
        }
    }

    /// Checks that `copies` is at least 2 and every ratio is finite and positive.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.copies < 2 {
            return Err(ProfileError::BadSoloRatio {
                field: "copies".into(),
                value: self.copies.to_string(),
                reason: "solo ratios compare with at least 2 copies",
            });
        }
        for part in ProfiledPart::ALL {
            let ratios = self.part(part);
            for (pass, value) in [("forward", ratios.forward), ("backward", ratios.backward)] {
                if !value.is_finite() || value <= 0.0 {
                    return Err(ProfileError::BadSoloRatio {
                        field: format!("{}.{pass}", part.name()),
                        value: value.to_string(),
                        reason: "ratios must be finite and positive",
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_must_be_positive_and_compare_with_two_copies() {
        let good = SoloRatios {
            copies: 2,
            embedding: PassRatios::ONE,
            layer_dense: PassRatios {
                forward: 0.9,
                backward: 0.8,
            },
            attention: PassRatios::ONE,
            head: PassRatios::ONE,
        };
        assert!(good.validate().is_ok());
        assert_eq!(
            good.layer_dense.scale(StagePass {
                forward: 10.0,
                backward: 10.0
            }),
            StagePass {
                forward: 9.0,
                backward: 8.0
            }
        );
        let one_copy = SoloRatios { copies: 1, ..good };
        assert!(
            one_copy
                .validate()
                .unwrap_err()
                .to_string()
                .contains("copies = 1")
        );
        let mut nan = good;
        nan.attention.backward = f64::NAN;
        let message = nan.validate().unwrap_err().to_string();
        assert!(message.contains("attention.backward = NaN"), "{message}");
    }
}

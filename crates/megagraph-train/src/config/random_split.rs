//! The `[data.class_split]` and `[data.ratio_split]` tables of the training config: a seeded
//! random split ([`ClassSplit`], [`RatioSplit`]) that replaces the dataset's own.

use megagraph_graph::{ClassSplit, RatioSplit};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// `[data.class_split]`: draw the split at random, `per_class` training nodes from every class,
/// then `valid` validation and `test` test nodes from the other labelled nodes, in place of
/// the dataset's split folder (the "random splits" on which SGFormer and DIFFormer
/// report Cora, CiteSeer and PubMed: 20, 500 and 1,000, the defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassSplitConfig {
    /// Training nodes per class. Default: 20.
    pub per_class: usize,
    /// Validation nodes. Default: 500.
    pub valid: usize,
    /// Test nodes. Default: 1000.
    pub test: usize,
    /// Seed of the draw; unset (the default): the run's `training.seed`, so that
    /// `megagraph eval --seeds N` averages over N splits as well as N initializations.
    pub seed: Option<u64>,
}

impl Default for ClassSplitConfig {
    fn default() -> Self {
        let sizes = ClassSplit::default();
        Self {
            per_class: sizes.per_class,
            valid: sizes.valid,
            test: sizes.test,
            seed: None,
        }
    }
}

impl ClassSplitConfig {
    /// The split's sizes.
    pub fn sizes(&self) -> ClassSplit {
        ClassSplit {
            per_class: self.per_class,
            valid: self.valid,
            test: self.test,
        }
    }

    /// The seed of the draw for a run seeded `run_seed`.
    pub fn seed_for(&self, run_seed: u64) -> u64 {
        self.seed.unwrap_or(run_seed)
    }

    /// Checks what does not depend on the labels.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.per_class == 0 {
            return Err(TrainError::InvalidConfig {
                field: "data.class_split.per_class",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// `[data.ratio_split]`: draw the split at random, shares `train` and `valid` of the labelled
/// nodes for training and validation and the rest for test, in place of the dataset's split
/// folder (the random 60/20/20 splits, the defaults, on which heterophilous benchmarks such as
/// Actor are reported, averaged over several draws).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RatioSplitConfig {
    /// Share of the labelled nodes for training, in (0, 1]. Default: 0.6.
    pub train: f64,
    /// Share of the labelled nodes for validation; `train + valid` at most 1. Default: 0.2.
    pub valid: f64,
    /// Seed of the draw; unset (the default): the run's `training.seed`.
    pub seed: Option<u64>,
}

impl Default for RatioSplitConfig {
    fn default() -> Self {
        let shares = RatioSplit::default();
        Self {
            train: shares.train,
            valid: shares.valid,
            seed: None,
        }
    }
}

impl RatioSplitConfig {
    /// The split's shares.
    pub fn shares(&self) -> RatioSplit {
        RatioSplit {
            train: self.train,
            valid: self.valid,
        }
    }

    /// The seed of the draw for a run seeded `run_seed`.
    pub fn seed_for(&self, run_seed: u64) -> u64 {
        self.seed.unwrap_or(run_seed)
    }

    /// Checks the shares.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.train > 0.0 && self.train <= 1.0) {
            return Err(TrainError::InvalidConfig {
                field: "data.ratio_split.train",
                reason: format!("must be in (0, 1], got {}", self.train),
            });
        }
        if !(self.valid >= 0.0 && self.train + self.valid <= 1.0 + 1e-9) {
            return Err(TrainError::InvalidConfig {
                field: "data.ratio_split.valid",
                reason: format!("must be >= 0 with train + valid at most 1, got {} + {}", self.train, self.valid),
            });
        }
        Ok(())
    }
}

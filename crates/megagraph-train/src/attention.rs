//! The `[attention]` section: which attention core the training steps run (megagraph's full
//! biased attention, or TorchGT's sparse and dual-interleaved attention), with TorchGT's
//! cluster-aware reordering and elastic computation reformation.

use megagraph_graph::sequence::{BlockReform, ReformThreshold};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// Which attention the training steps run (`--attention`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionMode {
    /// Every query over every key of its sequence, with the spatial bias (megagraph's model;
    /// the default).
    #[default]
    Full,
    /// TorchGT's sparse edge attention: each query over the keys joined to it by an edge of the
    /// sequence's induced subgraph, or a self-loop (no spatial bias).
    Sparse,
    /// TorchGT's dual-interleaved attention: full attention on `switch_freq` evenly spaced steps
    /// of every epoch, sparse attention on all other steps.
    Interleaved,
}

/// The named rules of `reform_threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReformRule {
    /// TorchGT's released code: `p = 1`, every cluster pair becomes dense tiles (the default).
    All,
    /// The paper's rule `p = β · E / N²`, with `β` stepped once per epoch by the
    /// [`BetaTuner`](crate::BetaTuner) from the loss-decrease speed (it starts at `β = 1`).
    Tuned,
}

/// Which cluster pairs elastic computation reformation turns into dense tiles
/// (`reform_threshold`: `"all"`, `"tuned"`, or a number: a fixed `β`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReformSetting {
    /// `"all"` or `"tuned"`.
    Rule(ReformRule),
    /// The paper's rule with this fixed `β` (no tuning).
    Beta(f64),
}

impl Default for ReformSetting {
    fn default() -> Self {
        Self::Rule(ReformRule::All)
    }
}

impl std::str::FromStr for ReformSetting {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "all" => Ok(Self::Rule(ReformRule::All)),
            "tuned" => Ok(Self::Rule(ReformRule::Tuned)),
            number => number.parse::<f64>().map(Self::Beta).map_err(|_| {
                format!("`{number}` is neither `all`, `tuned` nor a number (a fixed β)")
            }),
        }
    }
}

/// Attention section (`[attention]`): TorchGT's modes as baselines inside megagraph. Sparse and
/// interleaved attention run on one device (a mesh runs full attention).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AttentionConfig {
    /// `"full"` (default), `"sparse"` or `"interleaved"`.
    pub mode: AttentionMode,
    /// Steps of full attention per epoch in `interleaved` mode, evenly spaced (`F`; 0 = none).
    /// Default: 5.
    pub switch_freq: usize,
    /// Reorder each sequence cluster by cluster (TorchGT's cluster-aware reordering: the
    /// sequence's induced subgraph cut into `clusters` parts by the locality partitioner).
    /// Default: false.
    pub reorder: bool,
    /// Clusters per sequence of `reorder`. Default: 8.
    pub clusters: usize,
    /// Elastic computation reformation of the sparse steps' edges: the edges between sparse
    /// cluster pairs become as many nonzeros as dense 16 x 16 tiles. Needs `reorder` and a
    /// sparse or interleaved `mode`. Default: false.
    pub block_reform: bool,
    /// Which pairs `block_reform` reforms: `"all"` (default: TorchGT's released code, `p = 1`),
    /// `"tuned"` (the paper's `p = β · E / N²`, `β` tuned per epoch), or a number (a fixed `β`).
    pub reform_threshold: ReformSetting,
}

impl Default for AttentionConfig {
    fn default() -> Self {
        Self {
            mode: AttentionMode::Full,
            switch_freq: 5,
            reorder: false,
            clusters: 8,
            block_reform: false,
            reform_threshold: ReformSetting::default(),
        }
    }
}

/// The side of reformation's dense tiles (TorchGT's).
pub const REFORM_TILE: usize = 16;

impl AttentionConfig {
    /// Whether some training steps run sparse attention.
    pub fn has_sparse_steps(&self) -> bool {
        match self.mode {
            AttentionMode::Full => false,
            AttentionMode::Sparse => true,
            // with F at least the steps of an epoch every step is full; decided per epoch
            AttentionMode::Interleaved => true,
        }
    }

    /// Whether `β` is tuned per epoch ([`ReformRule::Tuned`] with `block_reform`).
    pub fn tunes_beta(&self) -> bool {
        self.block_reform && self.reform_threshold == ReformSetting::Rule(ReformRule::Tuned)
    }

    /// The reformation of the sparse steps under the current `beta` (used by the tuned rule),
    /// `None` without `block_reform`. `seed` places the tiles.
    pub fn reform(&self, beta: f64, seed: u64) -> Option<BlockReform> {
        self.block_reform.then_some(BlockReform {
            block: REFORM_TILE,
            threshold: match self.reform_threshold {
                ReformSetting::Rule(ReformRule::All) => ReformThreshold::All,
                ReformSetting::Rule(ReformRule::Tuned) => ReformThreshold::Beta(beta),
                ReformSetting::Beta(fixed) => ReformThreshold::Beta(fixed),
            },
            seed,
        })
    }

    /// Checks the section, naming the field (`attention.clusters`, ...).
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] for zero clusters with `reorder`, `block_reform` without
    /// `reorder` or with full attention, or a fixed `β` that is negative or not finite.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, reason: &str| {
            Err(TrainError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.reorder && self.clusters == 0 {
            return invalid(
                "attention.clusters",
                "must be at least 1 with attention.reorder",
            );
        }
        if self.block_reform && !self.reorder {
            return invalid(
                "attention.block_reform",
                "needs attention.reorder (--reorder): it reforms the edges between clusters",
            );
        }
        if self.block_reform && self.mode == AttentionMode::Full {
            return invalid(
                "attention.block_reform",
                "reforms the edges of sparse attention: use attention.mode = \"sparse\" or \"interleaved\"",
            );
        }
        if let ReformSetting::Beta(beta) = self.reform_threshold
            && !(beta.is_finite() && beta >= 0.0)
        {
            return Err(TrainError::InvalidConfig {
                field: "attention.reform_threshold",
                reason: format!("a fixed β must be finite and >= 0, got {beta}"),
            });
        }
        Ok(())
    }
}

/// The steps (0-based, within an epoch of `steps` steps) that run full attention in
/// interleaved mode: `F = switch_freq` steps evenly spaced, `⌊i · steps / F⌋` for `i < F`
/// (every step when `F ≥ steps`, none when `F = 0`). TorchGT's released node-level script
/// never increments the counter it switches on; this schedule is what its paper describes.
pub fn full_attention_steps(steps: usize, switch_freq: usize) -> Vec<usize> {
    if switch_freq >= steps {
        return (0..steps).collect();
    }
    (0..switch_freq).map(|i| i * steps / switch_freq).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_attention_runs_f_evenly_spaced_full_steps() {
        assert_eq!(full_attention_steps(10, 5), vec![0, 2, 4, 6, 8]);
        assert_eq!(full_attention_steps(10, 3), vec![0, 3, 6]);
        assert_eq!(full_attention_steps(7, 2), vec![0, 3]);
        assert_eq!(full_attention_steps(4, 4), vec![0, 1, 2, 3]);
        assert_eq!(full_attention_steps(3, 9), vec![0, 1, 2]);
        assert!(full_attention_steps(10, 0).is_empty());
        assert!(full_attention_steps(0, 5).is_empty());
        for steps in 1..40 {
            for f in 1..=steps {
                let full = full_attention_steps(steps, f);
                assert_eq!(full.len(), f, "{f} distinct steps of {steps}");
                assert!(full.windows(2).all(|w| w[0] < w[1]));
                // evenly spaced: gaps differ by at most one
                let gaps: Vec<usize> = full
                    .windows(2)
                    .map(|w| w[1] - w[0])
                    .chain([steps - full[f - 1]])
                    .collect();
                let (low, high) = (gaps.iter().min().copied(), gaps.iter().max().copied());
                assert!(
                    high.zip(low).is_some_and(|(h, l)| h - l <= 1),
                    "{steps} steps, F {f}: {full:?}"
                );
            }
        }
    }

    #[test]
    fn the_section_reads_from_toml_and_checks_its_fields() {
        let config: AttentionConfig =
            toml::from_str("mode = \"interleaved\"\nswitch_freq = 3\nreorder = true\nblock_reform = true\nreform_threshold = \"tuned\"\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.mode, AttentionMode::Interleaved);
        assert!(config.tunes_beta());
        assert_eq!(
            config.reform(1.5, 0).map(|r| r.threshold),
            Some(ReformThreshold::Beta(1.5))
        );
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        let fixed: AttentionConfig = toml::from_str(
            "mode = \"sparse\"\nreorder = true\nblock_reform = true\nreform_threshold = 2.5\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fixed.reform(1.0, 0).map(|r| r.threshold),
            Some(ReformThreshold::Beta(2.5))
        );
        assert!(!fixed.tunes_beta());
        let default = AttentionConfig {
            mode: AttentionMode::Sparse,
            reorder: true,
            block_reform: true,
            ..AttentionConfig::default()
        };
        assert_eq!(
            default.reform(1.0, 0).map(|r| r.threshold),
            Some(ReformThreshold::All),
            "released code's p = 1 by default"
        );
        let no_reorder = AttentionConfig {
            reorder: false,
            ..default.clone()
        };
        assert!(matches!(
            no_reorder.validate(),
            Err(TrainError::InvalidConfig {
                field: "attention.block_reform",
                ..
            })
        ));
        let full = AttentionConfig {
            mode: AttentionMode::Full,
            ..default
        };
        assert!(matches!(
            full.validate(),
            Err(TrainError::InvalidConfig {
                field: "attention.block_reform",
                ..
            })
        ));
        assert_eq!(
            "tuned".parse::<ReformSetting>(),
            Ok(ReformSetting::Rule(ReformRule::Tuned))
        );
        assert!("often".parse::<ReformSetting>().is_err());
    }
}

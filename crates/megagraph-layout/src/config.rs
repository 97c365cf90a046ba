//! [`ParallelConfig`]: the shape of a hybrid `pp x cp x dp` run and how layers map to pipeline
//! stages.
//!
//! - `pp` pipeline stages, each owning a contiguous run of layers (`stage_layers[i]` layers on
//!   stage `i`; stage 0 also holds the embedding stage, the last stage the classifier head), run
//!   with a 1F1B schedule over `micro_batches` micro-batches;
//! - `cp` context-parallel ranks per sequence: a sequence of `S` nodes is split into `cp` blocks of
//!   `S / cp` nodes and attention runs over the blocks as `cp_mode` says: a ring, or Ulysses
//!   (all-to-alls that scatter the heads, which must then be a multiple of `cp`);
//! - `dp` data-parallel replicas, each taking `sequences_per_step / dp` sequences per step;
//!   gradients are all-reduced over the `dp x cp` ranks that hold the same stage.
//!
//! The world has `pp * cp * dp` ranks.

use crate::CpMode;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// The degrees of a hybrid parallel run and its layer-to-stage split.
///
/// Build one with [`ParallelConfig::single_device`], [`ParallelConfig::uniform`] or a planner, and
/// check it against a model and workload with [`ParallelConfig::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParallelConfig {
    /// Pipeline-parallel degree: the number of stages (at least 1).
    pub pp: usize,
    /// Context-parallel degree: the number of blocks each sequence is split into (at least 1).
    pub cp: usize,
    /// Data-parallel degree: the number of model replicas (at least 1).
    pub dp: usize,
    /// Micro-batches per step and replica (at least 1); each holds
    /// `sequences_per_step / (dp * micro_batches)` sequences.
    pub micro_batches: usize,
    /// Layers held by each stage, in stage order: `pp` entries, each at least 1, summing to the
    /// model's layer count. Stage 0 also holds the embedding stage.
    pub stage_layers: Vec<usize>,
    /// How each context group attends over the whole sequence (`"ring"` or `"ulysses"` in
    /// JSON; a plan written before the field existed reads as `ring`). Only matters when
    /// `cp > 1`.
    #[serde(default)]
    pub cp_mode: CpMode,
}

/// Why a [`ParallelConfig`] does not fit a model and workload.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParallelConfigError {
    /// A degree, count or size is zero.
    #[error("{field} is 0: it must be at least 1")]
    ZeroSize {
        /// Name of the zero field (`pp`, `cp`, `dp`, `micro_batches`, `layers`, `seq_len`,
        /// `sequences_per_step`).
        field: &'static str,
    },
    /// More pipeline stages than layers: some stage would hold no layer.
    #[error("pp = {pp} is larger than the model's {layers} layers: every stage needs a layer")]
    MoreStagesThanLayers {
        /// The pipeline degree.
        pp: usize,
        /// The model's layer count.
        layers: usize,
    },
    /// `stage_layers` does not have one entry per stage.
    #[error("stage_layers has {entries} entries but pp = {pp}")]
    StageCountMismatch {
        /// Length of `stage_layers`.
        entries: usize,
        /// The pipeline degree.
        pp: usize,
    },
    /// A stage holds no layer.
    #[error("stage {stage} has 0 layers: every stage needs at least 1")]
    EmptyStage {
        /// Index of the empty stage.
        stage: usize,
    },
    /// `stage_layers` does not sum to the model's layer count.
    #[error("stage_layers sum to {sum} but the model has {layers} layers")]
    LayerSumMismatch {
        /// Sum of `stage_layers`.
        sum: usize,
        /// The model's layer count.
        layers: usize,
    },
    /// The sequence length is not a multiple of the context-parallel degree.
    #[error("cp = {cp} does not divide the sequence length {seq_len}")]
    ContextDoesNotDivideSequence {
        /// The context-parallel degree.
        cp: usize,
        /// The sequence length `S`.
        seq_len: usize,
    },
    /// The sequences per step are not a multiple of the data-parallel degree.
    #[error("dp = {dp} does not divide the {sequences_per_step} sequences per step")]
    DataDoesNotDivideSequences {
        /// The data-parallel degree.
        dp: usize,
        /// Sequences per optimizer step, over all replicas.
        sequences_per_step: usize,
    },
    /// A replica's sequences per step are not a multiple of the micro-batch count.
    #[error(
        "micro_batches = {micro_batches} does not divide the {per_replica} sequences per replica and step"
    )]
    MicroBatchesDoNotDivide {
        /// The micro-batch count.
        micro_batches: usize,
        /// Sequences per step and replica (`sequences_per_step / dp`).
        per_replica: usize,
    },
    /// Ulysses scatters the heads over the context ranks: `heads` must be a multiple of `cp`.
    #[error("cp_mode = ulysses needs heads = {heads} to be a multiple of cp = {cp}: each context rank attends for heads / cp of them")]
    HeadsNotMultipleOfContext {
        /// The model's attention heads.
        heads: usize,
        /// The context-parallel degree.
        cp: usize,
    },
    /// Ulysses' all-to-all would have to communicate a dense attention bias (the edge
    /// encoding's); the ring reads each rank's rows of it where they are.
    #[error("cp_mode = ulysses with cp = {cp} takes no dense attention bias (the model has an edge encoding): its all-to-all would communicate it; use cp_mode = ring")]
    DenseBiasWithUlysses {
        /// The context-parallel degree.
        cp: usize,
    },
}

impl ParallelConfig {
    /// One device: `pp = cp = dp = micro_batches = 1`, all `layers` on the only stage.
    pub fn single_device(layers: usize) -> Self {
        Self {
            pp: 1,
            cp: 1,
            dp: 1,
            micro_batches: 1,
            stage_layers: vec![layers],
            cp_mode: CpMode::Ring,
        }
    }

    /// A configuration whose `layers` are split over `pp` stages as evenly as possible; when `pp`
    /// does not divide `layers`, the last `layers % pp` stages take one layer more (stage 0 also
    /// carries the embedding stage).
    ///
    /// Fails when a degree is zero or `pp > layers`; the rest is checked by
    /// [`validate`](Self::validate).
    pub fn uniform(
        pp: usize,
        cp: usize,
        dp: usize,
        micro_batches: usize,
        layers: usize,
    ) -> Result<Self, ParallelConfigError> {
        for (field, value) in [
            ("pp", pp),
            ("cp", cp),
            ("dp", dp),
            ("micro_batches", micro_batches),
            ("layers", layers),
        ] {
            if value == 0 {
                return Err(ParallelConfigError::ZeroSize { field });
            }
        }
        if pp > layers {
            return Err(ParallelConfigError::MoreStagesThanLayers { pp, layers });
        }
        let base = layers / pp;
        let extra = layers % pp;
        let stage_layers = (0..pp)
            .map(|stage| base + usize::from(stage >= pp - extra))
            .collect();
        Ok(Self {
            pp,
            cp,
            dp,
            micro_batches,
            stage_layers,
            cp_mode: CpMode::Ring,
        })
    }

    /// This configuration with context mode `cp_mode`.
    pub fn with_cp_mode(mut self, cp_mode: CpMode) -> Self {
        self.cp_mode = cp_mode;
        self
    }

    /// Checks that a model with `heads` attention heads can run with this `cp_mode`: Ulysses
    /// with `cp > 1` needs `heads` to be a multiple of `cp` (the ring takes any head count).
    pub fn validate_heads(&self, heads: usize) -> Result<(), ParallelConfigError> {
        if self.cp_mode == CpMode::Ulysses && self.cp > 1 && !heads.is_multiple_of(self.cp) {
            return Err(ParallelConfigError::HeadsNotMultipleOfContext { heads, cp: self.cp });
        }
        Ok(())
    }

    /// Checks that a model with a dense attention bias (`dense_bias`: an edge encoding) can run
    /// with this `cp_mode`: Ulysses with `cp > 1` takes none (the ring takes one).
    pub fn validate_dense_bias(&self, dense_bias: bool) -> Result<(), ParallelConfigError> {
        if dense_bias && self.cp_mode == CpMode::Ulysses && self.cp > 1 {
            return Err(ParallelConfigError::DenseBiasWithUlysses { cp: self.cp });
        }
        Ok(())
    }

    /// The number of ranks: `pp * cp * dp`.
    pub fn world_size(&self) -> usize {
        self.pp * self.cp * self.dp
    }

    /// The layer indices held by `stage` (`None` when `stage >= stage_layers.len()`).
    pub fn stage_layer_range(&self, stage: usize) -> Option<Range<usize>> {
        let count = *self.stage_layers.get(stage)?;
        let start: usize = self.stage_layers[..stage].iter().sum();
        Some(start..start + count)
    }

    /// Checks this configuration against a model of `layers` layers trained on sequences of
    /// `seq_len` nodes, `sequences_per_step` sequences per optimizer step.
    ///
    /// Checks, in order: no zero sizes, `pp <= layers`, one non-empty `stage_layers` entry per
    /// stage summing to `layers`, `cp | seq_len`, `dp | sequences_per_step` and
    /// `micro_batches | sequences_per_step / dp`; returns the first failure.
    pub fn validate(
        &self,
        layers: usize,
        seq_len: usize,
        sequences_per_step: usize,
    ) -> Result<(), ParallelConfigError> {
        for (field, value) in [
            ("pp", self.pp),
            ("cp", self.cp),
            ("dp", self.dp),
            ("micro_batches", self.micro_batches),
            ("layers", layers),
            ("seq_len", seq_len),
            ("sequences_per_step", sequences_per_step),
        ] {
            if value == 0 {
                return Err(ParallelConfigError::ZeroSize { field });
            }
        }
        if self.pp > layers {
            return Err(ParallelConfigError::MoreStagesThanLayers {
                pp: self.pp,
                layers,
            });
        }
        if self.stage_layers.len() != self.pp {
            return Err(ParallelConfigError::StageCountMismatch {
                entries: self.stage_layers.len(),
                pp: self.pp,
            });
        }
        if let Some(stage) = self.stage_layers.iter().position(|&count| count == 0) {
            return Err(ParallelConfigError::EmptyStage { stage });
        }
        let sum: usize = self.stage_layers.iter().sum();
        if sum != layers {
            return Err(ParallelConfigError::LayerSumMismatch { sum, layers });
        }
        if !seq_len.is_multiple_of(self.cp) {
            return Err(ParallelConfigError::ContextDoesNotDivideSequence {
                cp: self.cp,
                seq_len,
            });
        }
        if !sequences_per_step.is_multiple_of(self.dp) {
            return Err(ParallelConfigError::DataDoesNotDivideSequences {
                dp: self.dp,
                sequences_per_step,
            });
        }
        let per_replica = sequences_per_step / self.dp;
        if !per_replica.is_multiple_of(self.micro_batches) {
            return Err(ParallelConfigError::MicroBatchesDoNotDivide {
                micro_batches: self.micro_batches,
                per_replica,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_device_is_valid_and_has_world_one() {
        let config = ParallelConfig::single_device(16);
        assert_eq!(config.world_size(), 1);
        assert_eq!(config.validate(16, 4096, 3), Ok(()));
        assert_eq!(config.stage_layer_range(0), Some(0..16));
        assert_eq!(config.stage_layer_range(1), None);
    }

    #[test]
    fn uniform_puts_the_remainder_on_later_stages() {
        let config = ParallelConfig::uniform(3, 2, 2, 4, 16).unwrap();
        assert_eq!(config.stage_layers, vec![5, 5, 6]);
        assert_eq!(config.world_size(), 12);
        assert_eq!(config.stage_layer_range(2), Some(10..16));
        assert_eq!(config.validate(16, 1024, 16), Ok(()));
        assert_eq!(
            ParallelConfig::uniform(17, 1, 1, 1, 16),
            Err(ParallelConfigError::MoreStagesThanLayers { pp: 17, layers: 16 })
        );
        assert_eq!(
            ParallelConfig::uniform(1, 0, 1, 1, 16),
            Err(ParallelConfigError::ZeroSize { field: "cp" })
        );
    }

    #[test]
    fn validate_names_each_reason() {
        let good = ParallelConfig::uniform(2, 4, 2, 2, 8).unwrap();
        assert_eq!(good.validate(8, 64, 8), Ok(()));
        assert_eq!(
            good.validate(8, 64, 0),
            Err(ParallelConfigError::ZeroSize {
                field: "sequences_per_step"
            })
        );
        assert_eq!(
            good.validate(8, 66, 8),
            Err(ParallelConfigError::ContextDoesNotDivideSequence { cp: 4, seq_len: 66 })
        );
        assert_eq!(
            good.validate(8, 64, 9),
            Err(ParallelConfigError::DataDoesNotDivideSequences {
                dp: 2,
                sequences_per_step: 9
            })
        );
        assert_eq!(
            good.validate(8, 64, 6),
            Err(ParallelConfigError::MicroBatchesDoNotDivide {
                micro_batches: 2,
                per_replica: 3
            })
        );
        assert_eq!(
            good.validate(1, 64, 8),
            Err(ParallelConfigError::MoreStagesThanLayers { pp: 2, layers: 1 })
        );
        assert_eq!(
            good.validate(9, 64, 8),
            Err(ParallelConfigError::LayerSumMismatch { sum: 8, layers: 9 })
        );
        let mut bad = good.clone();
        bad.stage_layers = vec![8, 0];
        assert_eq!(
            bad.validate(8, 64, 8),
            Err(ParallelConfigError::EmptyStage { stage: 1 })
        );
        bad.stage_layers = vec![8];
        assert_eq!(
            bad.validate(8, 64, 8),
            Err(ParallelConfigError::StageCountMismatch { entries: 1, pp: 2 })
        );
        let text = ParallelConfigError::MicroBatchesDoNotDivide {
            micro_batches: 2,
            per_replica: 3,
        }
        .to_string();
        assert!(
            text.contains("micro_batches = 2") && text.contains('3'),
            "{text}"
        );
    }

    #[test]
    fn round_trips_through_json() {
        let config = ParallelConfig::uniform(2, 1, 1, 4, 5).unwrap();
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            json,
            r#"{"pp":2,"cp":1,"dp":1,"micro_batches":4,"stage_layers":[2,3],"cp_mode":"ring"}"#
        );
        let back: ParallelConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
        let ulysses = ParallelConfig::uniform(1, 4, 1, 2, 3).unwrap().with_cp_mode(CpMode::Ulysses);
        let json = serde_json::to_value(&ulysses).unwrap();
        assert_eq!(json["cp_mode"], "ulysses");
        assert_eq!(serde_json::from_value::<ParallelConfig>(json).unwrap(), ulysses);
    }

    #[test]
    fn a_layout_written_before_cp_mode_reads_as_ring() {
        let old = r#"{"pp":1,"cp":2,"dp":1,"micro_batches":1,"stage_layers":[4]}"#;
        let config: ParallelConfig = serde_json::from_str(old).unwrap();
        assert_eq!(config.cp_mode, CpMode::Ring);
        assert_eq!(config, ParallelConfig::uniform(1, 2, 1, 1, 4).unwrap());
    }

    #[test]
    fn ulysses_needs_heads_to_be_a_multiple_of_cp() {
        let ring = ParallelConfig::uniform(1, 4, 1, 1, 2).unwrap();
        assert_eq!(ring.validate_heads(6), Ok(()));
        let ulysses = ring.with_cp_mode(CpMode::Ulysses);
        assert_eq!(ulysses.validate_heads(8), Ok(()));
        let error = ulysses.validate_heads(6).unwrap_err();
        assert_eq!(error, ParallelConfigError::HeadsNotMultipleOfContext { heads: 6, cp: 4 });
        assert!(error.to_string().contains("heads = 6") && error.to_string().contains("cp = 4"), "{error}");
        // one context rank attends for every head
        let single = ParallelConfig::uniform(1, 1, 2, 1, 2).unwrap().with_cp_mode(CpMode::Ulysses);
        assert_eq!(single.validate_heads(6), Ok(()));
    }

    #[test]
    fn ulysses_with_cp_above_one_takes_no_dense_bias() {
        let ring = ParallelConfig::uniform(1, 4, 1, 1, 2).unwrap();
        assert_eq!(ring.validate_dense_bias(true), Ok(()));
        let ulysses = ring.with_cp_mode(CpMode::Ulysses);
        assert_eq!(ulysses.validate_dense_bias(false), Ok(()));
        let error = ulysses.validate_dense_bias(true).unwrap_err();
        assert_eq!(error, ParallelConfigError::DenseBiasWithUlysses { cp: 4 });
        assert!(error.to_string().contains("cp_mode = ring"), "{error}");
        let single = ParallelConfig::uniform(1, 1, 2, 1, 2).unwrap().with_cp_mode(CpMode::Ulysses);
        assert_eq!(single.validate_dense_bias(true), Ok(()));
    }
}

//! The table itself: [`ProfileSample`]s of every [`ProfiledPart`] under a [`ProfileKey`], checked
//! by [`ProfileTable::validate`].

use super::error::ProfileError;
use super::part::ProfiledPart;
use super::solo::SoloRatios;
use crate::workload::ModelShape;
use serde::{Deserialize, Serialize};

/// One measurement of a part at one size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileSample {
    /// Nodes (rows) processed; for [`ProfiledPart::Attention`] the block edge `n` of an `n x n`
    /// block.
    pub size: usize,
    /// Seconds of the forward pass.
    pub forward_seconds: f64,
    /// Seconds of the backward pass.
    pub backward_seconds: f64,
    /// Bytes the forward pass keeps for the backward pass.
    pub saved_bytes: u64,
    /// Largest footprint during forward and backward (`saved_bytes` included, parameters not).
    pub peak_bytes: u64,
    /// Sequences in the measured batch: times and bytes are for all of them. Attention samples
    /// may have several (the op's cost per sequence changes with the batch); the other parts
    /// have 1 (they work on rows, whatever sequences they come from). Omitted from JSON when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub batch: usize,
}

fn one() -> usize {
    1
}

fn is_one(batch: &usize) -> bool {
    *batch == 1
}

/// What a profile was measured for. Two profiles are interchangeable when their keys are equal.
/// The layer count is not part of the key: every part is per layer or per model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProfileKey {
    /// Backend name, e.g. `cuda-fusion`, `flex`, or `analytic` for estimates.
    pub backend: String,
    /// Device name, e.g. `NVIDIA H200`.
    pub device: String,
    /// Bytes per element.
    pub dtype_bytes: usize,
    /// The model's shape with `layers` 0 (no layer count: its fields stand beside the others
    /// in JSON, without `layers`).
    #[serde(flatten)]
    pub shape: ModelShape,
}

/// Samples of every part for one [`ProfileKey`].
///
/// The model is profiled as four parts, so that context parallelism can be predicted from
/// single-device measurements:
///
/// | part | one sample at `size = n` is | time grows with |
/// |---|---|---|
/// | [`embedding`](ProfiledPart::Embedding) | the embedding stage on `n` nodes (with an edge encoding: one sequence of `n` nodes and the bias of its `n^2` pairs) | `n` (`n^2` with an edge encoding) |
/// | [`layer_dense`](ProfiledPart::LayerDense) | one layer without its attention core (2 layer norms, Q/K/V/O projections, FFN, residuals) on `n` nodes | `n` |
/// | [`attention`](ProfiledPart::Attention) | one attention block: `n` queries against `n` keys with the spatial bias read from the `u8` distance index (one ring step), and with an edge encoding its dense `[heads, n, n]` bias | `n^2` |
/// | [`head`](ProfiledPart::Head) | final layer norm, classifier and loss on `n` nodes | `n` |
///
/// A full layer on a sequence of `S` nodes is `layer_dense(S) + attention(S)`; under context
/// parallelism `cp` it is `layer_dense(S/cp)` plus `cp` ring steps of `attention(S/cp)`.
///
/// Memory per sample: `saved_bytes` are what the forward pass keeps for the backward pass (for the
/// attention part: what a block of `n` local rows keeps, Q/K/V and the log-sum-exp, once per
/// layer, not per ring step); `peak_bytes` is the largest footprint while running forward and
/// backward, `saved_bytes` included, parameters excluded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileTable {
    /// What was profiled.
    pub key: ProfileKey,
    /// `true` for estimates from [`analytic_profile`](super::analytic_profile), `false` for measurements.
    pub analytic: bool,
    /// Embedding stage samples, by increasing size.
    pub embedding: Vec<ProfileSample>,
    /// Layer-without-attention samples, by increasing size.
    pub layer_dense: Vec<ProfileSample>,
    /// Attention block samples, by increasing block edge.
    pub attention: Vec<ProfileSample>,
    /// Head samples, by increasing size.
    pub head: Vec<ProfileSample>,
    /// Bytes a rank of the parallel runtime holds at its peak beyond what the parts account for
    /// (autodiff and optimizer bookkeeping, allocator and runtime structures), measured by the
    /// profiler with one real one-layer training step at the smallest size; 0 for analytic
    /// profiles.
    #[serde(default)]
    pub runtime_overhead_bytes: u64,
    /// How much faster each part runs when its rank computes alone on the machine than with
    /// all the profiler's copies computing ([`SoloRatios`]); `None` when not measured (analytic
    /// profiles, and profiles of one copy: a GPU rank has its device to itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo: Option<SoloRatios>,
}

impl ProfileKey {
    /// The key of `shape` profiled with `backend` on `device` with `dtype_bytes`-byte elements.
    pub fn new(
        backend: impl Into<String>,
        device: impl Into<String>,
        shape: &ModelShape,
        dtype_bytes: usize,
    ) -> Self {
        Self {
            backend: backend.into(),
            device: device.into(),
            dtype_bytes,
            shape: ModelShape {
                layers: 0,
                ..shape.clone()
            },
        }
    }

    /// Whether this key was profiled for `shape` (any layer count) with `dtype_bytes`.
    pub fn fits(&self, shape: &ModelShape, dtype_bytes: usize) -> bool {
        *self
            == Self::new(
                self.backend.clone(),
                self.device.clone(),
                shape,
                dtype_bytes,
            )
    }

    /// A file-name-safe string naming the key, e.g.
    /// `cuda-fusion_NVIDIA-H200_f4_h8-d64-f64-x100-c47-s6-g65-t128`.
    pub fn cache_key(&self) -> String {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect()
        };
        format!(
            "{}_{}_f{}_h{}-d{}-f{}-x{}-c{}-s{}-g{}-t{}",
            clean(&self.backend),
            clean(&self.device),
            self.dtype_bytes,
            self.shape.heads,
            self.shape.hidden,
            self.shape.ffn_hidden,
            self.shape.feature_dim,
            self.shape.num_classes,
            self.shape.distance_buckets,
            self.shape.degree_buckets,
            self.shape.key_tile
        )
    }
}

impl ProfileTable {
    /// The samples of `part`.
    pub fn samples(&self, part: ProfiledPart) -> &[ProfileSample] {
        match part {
            ProfiledPart::Embedding => &self.embedding,
            ProfiledPart::LayerDense => &self.layer_dense,
            ProfiledPart::Attention => &self.attention,
            ProfiledPart::Head => &self.head,
        }
    }

    /// The samples of `part`, to change in place.
    pub fn samples_mut(&mut self, part: ProfiledPart) -> &mut Vec<ProfileSample> {
        match part {
            ProfiledPart::Embedding => &mut self.embedding,
            ProfiledPart::LayerDense => &mut self.layer_dense,
            ProfiledPart::Attention => &mut self.attention,
            ProfiledPart::Head => &mut self.head,
        }
    }

    /// The attention samples measured at `batch` sequences.
    pub fn attention_at(&self, batch: usize) -> Vec<ProfileSample> {
        self.attention
            .iter()
            .filter(|s| s.batch == batch)
            .copied()
            .collect()
    }

    /// The batches the attention part was measured at, increasing.
    pub fn attention_batches(&self) -> Vec<usize> {
        let mut batches: Vec<usize> = self.attention.iter().map(|s| s.batch).collect();
        batches.dedup();
        batches
    }

    /// Checks that every part has at least two samples (per batch, for attention) with positive,
    /// strictly increasing sizes and finite non-negative times; attention samples are ordered by
    /// batch, then size; other parts have batch 1; solo ratios, if any, are finite and positive.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if let Some(solo) = &self.solo {
            solo.validate()?;
        }
        for part in ProfiledPart::ALL {
            let samples = self.samples(part);
            if samples.len() < 2 {
                return Err(ProfileError::TooFewSamples {
                    part,
                    count: samples.len(),
                });
            }
            for (index, sample) in samples.iter().enumerate() {
                let bad_batch = |reason| ProfileError::BadSample {
                    part,
                    index,
                    field: "batch",
                    value: sample.batch.to_string(),
                    reason,
                };
                if sample.batch == 0 {
                    return Err(bad_batch("batches must be positive"));
                }
                if part != ProfiledPart::Attention && sample.batch != 1 {
                    return Err(bad_batch("only attention samples may have a batch above 1"));
                }
                if index > 0 && sample.batch < samples[index - 1].batch {
                    return Err(bad_batch("attention samples must be ordered by batch"));
                }
                let first_of_batch = index == 0 || samples[index - 1].batch != sample.batch;
                let last_of_batch =
                    index + 1 == samples.len() || samples[index + 1].batch != sample.batch;
                if first_of_batch && last_of_batch {
                    return Err(ProfileError::TooFewSamples { part, count: 1 });
                }
                let previous = (!first_of_batch).then(|| samples[index - 1]);
                let bad = |field, value: String, reason| ProfileError::BadSample {
                    part,
                    index,
                    field,
                    value,
                    reason,
                };
                if sample.size == 0 {
                    return Err(bad("size", "0".into(), "sizes must be positive"));
                }
                if previous.is_some_and(|p| sample.size <= p.size) {
                    return Err(bad(
                        "size",
                        sample.size.to_string(),
                        "sizes must strictly increase",
                    ));
                }
                for (field, value) in [
                    ("forward_seconds", sample.forward_seconds),
                    ("backward_seconds", sample.backward_seconds),
                ] {
                    if !value.is_finite() || value < 0.0 {
                        return Err(bad(
                            field,
                            value.to_string(),
                            "times must be finite and non-negative",
                        ));
                    }
                }
                if sample.peak_bytes < sample.saved_bytes {
                    return Err(bad(
                        "peak_bytes",
                        sample.peak_bytes.to_string(),
                        "peak_bytes must be at least saved_bytes",
                    ));
                }
            }
        }
        Ok(())
    }
}

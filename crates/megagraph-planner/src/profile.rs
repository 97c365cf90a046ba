//! [`ProfileTable`]: measured (or estimated) forward/backward seconds and memory of the model's
//! parts at a ladder of sizes, stored as JSON under a cache key.
//!
//! The model is profiled as four parts, so that context parallelism can be predicted from
//! single-device measurements:
//!
//! | part | one sample at `size = n` is | time grows with |
//! |---|---|---|
//! | [`embedding`](ProfiledPart::Embedding) | the embedding stage on `n` nodes | `n` |
//! | [`layer_dense`](ProfiledPart::LayerDense) | one layer without its attention core (2 layer norms, Q/K/V/O projections, FFN, residuals) on `n` nodes | `n` |
//! | [`attention`](ProfiledPart::Attention) | one attention block: `n` queries against `n` keys with the spatial bias read from the `u8` distance index (one ring step) | `n^2` |
//! | [`head`](ProfiledPart::Head) | final layer norm, classifier and loss on `n` nodes | `n` |
//!
//! A full layer on a sequence of `S` nodes is `layer_dense(S) + attention(S)`; under context
//! parallelism `cp` it is `layer_dense(S/cp)` plus `cp` ring steps of `attention(S/cp)`.
//!
//! Memory per sample: `saved_bytes` are what the forward pass keeps for the backward pass (for the
//! attention part: what a block of `n` local rows keeps, Q/K/V and the log-sum-exp, once per
//! layer, not per ring step); `peak_bytes` is the largest footprint while running forward and
//! backward, `saved_bytes` included, parameters excluded.
//!
//! Real measurements come from the trainer's profiler (which times Burn layers);
//! [`analytic_profile`] estimates the same table from FLOP and byte counts for simulated devices.

use crate::cluster::ComputeHints;
use crate::sharing::SoloRatios;
use crate::workload::ModelShape;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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

/// The profiled parts of the model (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfiledPart {
    /// The embedding stage (input linear, degree embeddings).
    Embedding,
    /// One layer without the attention core.
    LayerDense,
    /// One `n x n` attention block.
    Attention,
    /// Final layer norm, classifier and loss.
    Head,
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
    /// Attention heads.
    pub heads: usize,
    /// Model width.
    pub hidden: usize,
    /// FFN width.
    pub ffn: usize,
    /// Node feature width.
    pub feature_dim: usize,
    /// Output classes.
    pub num_classes: usize,
    /// Distance buckets of the spatial table.
    pub distance_buckets: usize,
    /// Degree buckets of the centrality embeddings.
    pub degree_buckets: usize,
    /// Key tile of the attention kernel.
    pub key_tile: usize,
}

/// Samples of every part for one [`ProfileKey`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileTable {
    /// What was profiled.
    pub key: ProfileKey,
    /// `true` for estimates from [`analytic_profile`], `false` for measurements.
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

/// The sizes [`analytic_profile`] (and a profiler) sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileLadder {
    /// Node counts for the embedding, dense-layer and head parts.
    pub rows: Vec<usize>,
    /// Block edges for the attention part.
    pub blocks: Vec<usize>,
    /// Sequences per batch at which the attention part is measured (every block edge at each,
    /// up to [`max_attention_pairs`](Self::max_attention_pairs)). Default: `[1]`.
    #[serde(default = "batch_one")]
    pub attention_batches: Vec<usize>,
    /// Largest `batch * block^2` measured for the attention part at batches above the smallest
    /// (0: no limit). Default: 0.
    #[serde(default)]
    pub max_attention_pairs: usize,
}

fn batch_one() -> Vec<usize> {
    vec![1]
}

impl ProfileLadder {
    /// Sorted distinct sizes of `sizes`.
    fn distinct(sizes: &[usize]) -> Vec<usize> {
        let mut sizes = sizes.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The `(batch, block)` pairs at which the attention part is measured, by batch then block:
    /// every block at the smallest batch, and at larger batches the blocks whose
    /// `batch * block^2` stays within [`max_attention_pairs`](Self::max_attention_pairs) (at
    /// least the two smallest blocks, so every batch can be fitted).
    pub fn attention_points(&self) -> Vec<(usize, usize)> {
        let blocks = Self::distinct(&self.blocks);
        let mut batches = Self::distinct(&self.attention_batches);
        batches.retain(|&b| b > 0);
        if batches.is_empty() {
            batches.push(1);
        }
        let mut points = Vec::new();
        for (i, &batch) in batches.iter().enumerate() {
            for (j, &block) in blocks.iter().enumerate() {
                let pairs = batch.saturating_mul(block).saturating_mul(block);
                if i == 0
                    || j < 2
                    || self.max_attention_pairs == 0
                    || pairs <= self.max_attention_pairs
                {
                    points.push((batch, block));
                }
            }
        }
        points
    }

    /// The row counts measured for the embedding, dense-layer and head parts, sorted.
    pub fn row_points(&self) -> Vec<usize> {
        Self::distinct(&self.rows)
    }
}

/// Why a profile cannot be loaded, saved or used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Reading or writing the file failed.
    #[error("cannot access profile {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid profile table.
    #[error("{path}:{line}:{column}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A part has fewer than two samples, so no line can be fitted.
    #[error("profile part {part:?} has {count} samples: at least 2 distinct sizes are needed")]
    TooFewSamples {
        /// The part.
        part: ProfiledPart,
        /// Its sample count.
        count: usize,
    },
    /// A sample has a zero size or a negative or non-finite time, or sizes do not increase.
    #[error("profile part {part:?}, sample {index}: {field} = {value} ({reason})")]
    BadSample {
        /// The part.
        part: ProfiledPart,
        /// Index of the sample in the part's list.
        index: usize,
        /// Name of the offending field.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
    /// A solo ratio is not finite and positive, or compares with fewer than 2 copies.
    #[error("profile solo ratios: {field} = {value} ({reason})")]
    BadSoloRatio {
        /// The offending field, e.g. `attention.backward`.
        field: String,
        /// The offending value.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
    /// A cached profile was measured for something else.
    #[error("profile {path} has key {found} but {expected} was requested")]
    KeyMismatch {
        /// The file.
        path: PathBuf,
        /// The requested key's cache key.
        expected: String,
        /// The file's key's cache key.
        found: String,
    },
    /// The ladder of an analytic profile is too short or holds a zero.
    #[error("profile ladder {which} = {sizes:?}: need at least 2 distinct positive sizes")]
    BadLadder {
        /// `rows` or `blocks`.
        which: &'static str,
        /// The offending sizes.
        sizes: Vec<usize>,
    },
}

impl ProfiledPart {
    /// All parts, in model order.
    pub const ALL: [ProfiledPart; 4] = [
        Self::Embedding,
        Self::LayerDense,
        Self::Attention,
        Self::Head,
    ];

    /// The part's name as in the JSON file.
    pub fn name(self) -> &'static str {
        match self {
            Self::Embedding => "embedding",
            Self::LayerDense => "layer_dense",
            Self::Attention => "attention",
            Self::Head => "head",
        }
    }
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
            heads: shape.heads,
            hidden: shape.hidden,
            ffn: shape.ffn,
            feature_dim: shape.feature_dim,
            num_classes: shape.num_classes,
            distance_buckets: shape.distance_buckets,
            degree_buckets: shape.degree_buckets,
            key_tile: shape.key_tile,
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
            self.heads,
            self.hidden,
            self.ffn,
            self.feature_dim,
            self.num_classes,
            self.distance_buckets,
            self.degree_buckets,
            self.key_tile
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

    /// Reads and validates a profile from a JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let table: Self = serde_json::from_str(&text).map_err(|error| ProfileError::Json {
            path: path.to_path_buf(),
            line: error.line(),
            column: error.column(),
            message: error.to_string(),
        })?;
        table.validate()?;
        Ok(table)
    }

    /// Writes this profile as pretty JSON, creating parent directories. The file is written
    /// atomically (a temporary file in the same folder, then a rename), so readers never see a
    /// half-written profile.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        let path = path.as_ref();
        let io = |source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let text =
            serde_json::to_string_pretty(self).map_err(|error| io(std::io::Error::other(error)))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|error| {
            let _ = std::fs::remove_file(&tmp);
            io(error)
        })
    }

    /// Where the profile for `key` is cached under `dir`: `dir/profile_<cache key>.json`.
    pub fn cache_path(dir: impl AsRef<Path>, key: &ProfileKey) -> PathBuf {
        dir.as_ref()
            .join(format!("profile_{}.json", key.cache_key()))
    }

    /// The cached profile for `key` under `dir`, `None` when there is none.
    pub fn load_cached(
        dir: impl AsRef<Path>,
        key: &ProfileKey,
    ) -> Result<Option<Self>, ProfileError> {
        let path = Self::cache_path(dir, key);
        if !path.exists() {
            return Ok(None);
        }
        let table = Self::load(&path)?;
        if table.key != *key {
            return Err(ProfileError::KeyMismatch {
                path,
                expected: key.cache_key(),
                found: table.key.cache_key(),
            });
        }
        Ok(Some(table))
    }

    /// Saves this profile as the cache entry of its key under `dir`; returns the path.
    pub fn save_cached(&self, dir: impl AsRef<Path>) -> Result<PathBuf, ProfileError> {
        let path = Self::cache_path(dir, &self.key);
        self.save(&path)?;
        Ok(path)
    }
}

impl std::fmt::Display for ProfileTable {
    /// One block per part: size, forward and backward milliseconds, saved and peak bytes; then
    /// the solo ratios, if measured.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Profile {} ({})",
            self.key.cache_key(),
            if self.analytic {
                "analytic estimate"
            } else {
                "measured"
            }
        )?;
        for part in ProfiledPart::ALL {
            writeln!(
                f,
                "  {:<12} {:>13} {:>12} {:>12} {:>11} {:>11}",
                part.name(),
                if part == ProfiledPart::Attention {
                    "batch x block"
                } else {
                    "rows"
                },
                "forward ms",
                "backward ms",
                "saved",
                "peak"
            )?;
            for s in self.samples(part) {
                writeln!(
                    f,
                    "  {:<12} {:>13} {:>12.3} {:>12.3} {:>11} {:>11}",
                    "",
                    if part == ProfiledPart::Attention {
                        format!("{} x {}", s.batch, s.size)
                    } else {
                        s.size.to_string()
                    },
                    s.forward_seconds * 1e3,
                    s.backward_seconds * 1e3,
                    crate::memory::format_bytes(s.saved_bytes),
                    crate::memory::format_bytes(s.peak_bytes)
                )?;
            }
        }
        if let Some(solo) = &self.solo {
            writeln!(
                f,
                "  alone on the machine (time alone / time with {} copies computing):",
                solo.copies
            )?;
            for part in ProfiledPart::ALL {
                let ratios = solo.part(part);
                writeln!(
                    f,
                    "  {:<12} forward {:.2}, backward {:.2}",
                    part.name(),
                    ratios.forward,
                    ratios.backward
                )?;
            }
        }
        Ok(())
    }
}

impl Default for ProfileLadder {
    /// Powers of two: rows 64 ..= 2^20, blocks 64 ..= 2^18.
    fn default() -> Self {
        Self {
            rows: (6..=20).map(|p| 1usize << p).collect(),
            blocks: (6..=18).map(|p| 1usize << p).collect(),
            attention_batches: vec![1],
            max_attention_pairs: 0,
        }
    }
}

/// One kernel of the analytic model: its arithmetic and its memory traffic.
#[derive(Clone, Copy)]
struct Kernel {
    flops: f64,
    bytes: f64,
}

impl Kernel {
    /// Roofline time, never below one kernel launch.
    fn seconds(&self, hints: &ComputeHints) -> f64 {
        let compute = self.flops / (hints.peak_flops * hints.efficiency);
        let memory = self.bytes / (hints.memory_bandwidth_bytes_per_second * hints.efficiency);
        compute.max(memory).max(hints.kernel_launch_seconds)
    }
}

/// Estimates a [`ProfileTable`] from FLOP and byte counts (a roofline per kernel, each at least
/// one kernel launch), for devices that cannot be measured here.
///
/// Backward passes are modeled as two kernels per forward kernel (input and weight gradients,
/// or the gradient of an elementwise op), each as costly as the forward kernel; the attention
/// backward recomputes the scores. The key's backend is `analytic`.
pub fn analytic_profile(
    hints: &ComputeHints,
    device: &str,
    shape: &ModelShape,
    dtype_bytes: usize,
    ladder: &ProfileLadder,
) -> Result<ProfileTable, ProfileError> {
    for (which, sizes) in [("rows", &ladder.rows), ("blocks", &ladder.blocks)] {
        let mut distinct = sizes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 || distinct[0] == 0 {
            return Err(ProfileError::BadLadder {
                which,
                sizes: sizes.clone(),
            });
        }
    }
    let model = AnalyticModel {
        hints,
        d: shape.hidden as f64,
        f: shape.ffn as f64,
        h: shape.heads as f64,
        features: shape.feature_dim as f64,
        classes: shape.num_classes as f64,
        tile: shape.key_tile as f64,
        e: dtype_bytes as f64,
    };
    let series =
        |sizes: &[usize], sample: &dyn Fn(f64) -> ([f64; 2], [f64; 2])| -> Vec<ProfileSample> {
            let mut sizes = sizes.to_vec();
            sizes.sort_unstable();
            sizes.dedup();
            sizes
                .into_iter()
                .map(|size| {
                    let ([forward_seconds, backward_seconds], [saved, peak]) = sample(size as f64);
                    ProfileSample {
                        size,
                        forward_seconds,
                        backward_seconds,
                        saved_bytes: saved.ceil() as u64,
                        peak_bytes: peak.ceil() as u64,
                        batch: 1,
                    }
                })
                .collect()
        };
    let table = ProfileTable {
        key: ProfileKey::new("analytic", device, shape, dtype_bytes),
        analytic: true,
        embedding: series(&ladder.rows, &|n| model.embedding(n)),
        layer_dense: series(&ladder.rows, &|n| model.layer_dense(n)),
        attention: series(&ladder.blocks, &|n| model.attention(n)),
        head: series(&ladder.rows, &|n| model.head(n)),
        runtime_overhead_bytes: 0,
        solo: None,
    };
    table.validate()?;
    Ok(table)
}

/// FLOP and byte counts of the parts; `e` is bytes per element.
struct AnalyticModel<'a> {
    hints: &'a ComputeHints,
    d: f64,
    f: f64,
    h: f64,
    features: f64,
    classes: f64,
    tile: f64,
    e: f64,
}

impl AnalyticModel<'_> {
    /// `([forward, backward] seconds, [saved, peak] bytes)` of a kernel sequence.
    fn times(&self, kernels: &[Kernel]) -> [f64; 2] {
        let forward: f64 = kernels.iter().map(|k| k.seconds(self.hints)).sum();
        [forward, 2.0 * forward]
    }

    /// A matmul `[n, k] x [k, m]`.
    fn matmul(&self, n: f64, k: f64, m: f64) -> Kernel {
        Kernel {
            flops: 2.0 * n * k * m,
            bytes: self.e * (n * k + k * m + n * m),
        }
    }

    /// An elementwise kernel reading `inputs` and writing `outputs` elements.
    fn elementwise(&self, inputs: f64, outputs: f64, flops_per_output: f64) -> Kernel {
        Kernel {
            flops: flops_per_output * outputs,
            bytes: self.e * (inputs + outputs),
        }
    }

    fn embedding(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, e) = (self.d, self.e);
        let kernels = [
            self.matmul(n, self.features, d),
            // Two degree-embedding gathers and the sum: indices (u32) in, rows out.
            Kernel {
                flops: 2.0 * n * d,
                bytes: e * 3.0 * n * d + 8.0 * n,
            },
        ];
        // Features (for the weight gradient) and degree indices.
        let saved = e * n * self.features + 8.0 * n;
        (self.times(&kernels), [saved, saved + e * 2.0 * n * d])
    }

    fn layer_dense(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, f, e) = (self.d, self.f, self.e);
        let kernels = [
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, 3.0 * d),
            self.matmul(n, d, d),
            self.elementwise(2.0 * n * d, n * d, 1.0),
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, f),
            self.elementwise(n * f, n * f, 10.0),
            self.matmul(n, f, d),
            self.elementwise(2.0 * n * d, n * d, 1.0),
        ];
        // Layer input, first norm output, attention output, residual, second norm output, FFN
        // pre-activation and activation, and two layer norms' mean and rstd (f32).
        let saved = e * n * (5.0 * d + 2.0 * f) + 16.0 * n;
        // Largest transient: an intermediate and its gradient.
        let transient = e * n * 2.0 * (3.0 * d).max(f);
        (self.times(&kernels), [saved, saved + transient])
    }

    fn attention(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, h, e) = (self.d, self.h, self.e);
        let pairs = n * n;
        let forward = [
            // QK^T, bias gather from the u8 index, online softmax, PV: one fused kernel.
            Kernel {
                flops: 4.0 * pairs * d + 8.0 * pairs * h,
                bytes: pairs + e * 4.0 * n * d + 4.0 * 2.0 * n * h,
            },
            // Merging the block's partial output into the running output.
            self.elementwise(n * (2.0 * d + 4.0 * h), n * (d + 2.0 * h), 4.0),
        ];
        let backward = [
            // Recompute scores, dV, dP; softmax and bias gradients.
            Kernel {
                flops: 6.0 * pairs * d + 12.0 * pairs * h,
                bytes: pairs + e * 6.0 * n * d + 4.0 * n * h,
            },
            // dQ, dK.
            Kernel {
                flops: 4.0 * pairs * d + 4.0 * pairs * h,
                bytes: pairs + e * 6.0 * n * d,
            },
        ];
        let seconds = |ks: &[Kernel]| ks.iter().map(|k| k.seconds(self.hints)).sum::<f64>();
        // Q, K, V of the local rows and the log-sum-exp (f32) per head.
        let saved = e * 3.0 * n * d + 4.0 * n * h;
        // Score and probability tiles, output accumulator and softmax statistics, and in backward
        // the dQ/dK/dV accumulators.
        let workspace =
            e * 2.0 * n * self.tile.min(n) * h + 4.0 * n * (d + 2.0 * h) + e * 3.0 * n * d;
        (
            [seconds(&forward), seconds(&backward)],
            [saved, saved + workspace],
        )
    }

    fn head(&self, n: f64) -> ([f64; 2], [f64; 2]) {
        let (d, c, e) = (self.d, self.classes, self.e);
        let kernels = [
            self.elementwise(n * d, n * d, 8.0),
            self.matmul(n, d, c),
            self.elementwise(n * c, n * c, 5.0),
        ];
        // Norm output, logits and norm statistics.
        let saved = e * n * (d + c) + 8.0 * n;
        (self.times(&kernels), [saved, saved + e * n * c])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> ComputeHints {
        ComputeHints {
            peak_flops: 4.95e14,
            memory_bandwidth_bytes_per_second: 4.8e12,
            efficiency: 0.5,
            kernel_launch_seconds: 5e-6,
        }
    }

    #[test]
    fn analytic_profile_is_valid_and_scales() {
        let shape = ModelShape::paper();
        let table =
            analytic_profile(&h200(), "NVIDIA H200", &shape, 4, &ProfileLadder::default()).unwrap();
        assert_eq!(table.key.backend, "analytic");
        let attention = &table.attention;
        let (small, large) = (
            &attention[attention.len() - 2],
            &attention[attention.len() - 1],
        );
        // Twice the block edge: about four times the work.
        let ratio = large.forward_seconds / small.forward_seconds;
        assert!((3.5..=4.5).contains(&ratio), "{ratio}");
        // Tiny sizes are launch-bound.
        assert!(table.layer_dense[0].forward_seconds >= 9.0 * 5e-6);
        // Saved bytes are linear in rows.
        let dense = &table.layer_dense;
        assert_eq!(dense[1].saved_bytes, 2 * dense[0].saved_bytes);
    }

    #[test]
    fn json_round_trip_and_cache() {
        let dir = tempfile::tempdir().unwrap();
        let shape = ModelShape::paper();
        let ladder = ProfileLadder {
            rows: vec![64, 128, 256],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        let table = analytic_profile(&h200(), "NVIDIA H200", &shape, 4, &ladder).unwrap();
        let path = table.save_cached(dir.path()).unwrap();
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("profile_analytic_NVIDIA-H200_f4_h8-d64")
        );
        let back = ProfileTable::load_cached(dir.path(), &table.key)
            .unwrap()
            .unwrap();
        assert_eq!(back, table);
        let other = ProfileKey::new("cuda", "NVIDIA H200", &shape, 4);
        assert!(
            ProfileTable::load_cached(dir.path(), &other)
                .unwrap()
                .is_none()
        );
        assert!(table.key.fits(
            &ModelShape {
                layers: 3,
                ..shape.clone()
            },
            4
        ));
        assert!(!table.key.fits(&shape, 2));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for field in [
            "size",
            "forward_seconds",
            "backward_seconds",
            "saved_bytes",
            "peak_bytes",
        ] {
            assert!(json["attention"][0].get(field).is_some(), "{field}");
        }
    }

    #[test]
    fn load_reports_position_and_bad_samples() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{\n  \"key\": 3\n}").unwrap();
        match ProfileTable::load(&path) {
            Err(ProfileError::Json { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected Json error, got {other:?}"),
        }
        let shape = ModelShape::paper();
        let ladder = ProfileLadder {
            rows: vec![64, 128],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        let mut table = analytic_profile(&h200(), "gpu", &shape, 4, &ladder).unwrap();
        table.head[1].size = 64;
        assert!(matches!(
            table.validate(),
            Err(ProfileError::BadSample {
                part: ProfiledPart::Head,
                index: 1,
                field: "size",
                ..
            })
        ));
        table.head.truncate(1);
        assert!(matches!(
            table.validate(),
            Err(ProfileError::TooFewSamples { count: 1, .. })
        ));
        let bad_ladder = ProfileLadder {
            rows: vec![64, 64],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        assert!(matches!(
            analytic_profile(&h200(), "gpu", &shape, 4, &bad_ladder),
            Err(ProfileError::BadLadder { which: "rows", .. })
        ));
    }

    #[test]
    fn attention_points_cap_the_pairs_of_larger_batches() {
        let ladder = ProfileLadder {
            rows: vec![64, 128],
            blocks: vec![32, 64, 128, 256],
            attention_batches: vec![4, 1, 2],
            max_attention_pairs: 2 * 128 * 128,
        };
        assert_eq!(
            ladder.attention_points(),
            vec![
                (1, 32),
                (1, 64),
                (1, 128),
                (1, 256),
                (2, 32),
                (2, 64),
                (2, 128),
                (4, 32),
                (4, 64),
            ]
        );
        // batches above 1 round-trip through JSON; batch 1 is not written
        let sample = ProfileSample {
            size: 8,
            forward_seconds: 1.0,
            backward_seconds: 2.0,
            saved_bytes: 3,
            peak_bytes: 4,
            batch: 1,
        };
        let json = serde_json::to_value(sample).unwrap();
        assert!(json.get("batch").is_none());
        let two = ProfileSample { batch: 2, ..sample };
        let back: ProfileSample =
            serde_json::from_value(serde_json::to_value(two).unwrap()).unwrap();
        assert_eq!(back, two);
    }
}

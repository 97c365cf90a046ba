//! [`ClusterSpec`]: the devices a plan runs on, read from a TOML file (see
//! `configs/clusters/*.toml` for documented examples).
//!
//! Links follow the alpha-beta model: moving `n` bytes over a link takes
//! `latency_seconds + n / bandwidth_bytes_per_second`.

use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A cluster of identical devices: `nodes` machines with `devices_per_node` devices each.
///
/// Ranks are numbered node by node: rank `r` lives on node `r / devices_per_node`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Name shown in reports.
    pub name: String,
    /// Device model, e.g. `NVIDIA H200`; profiles are keyed by it.
    pub device: String,
    /// Number of nodes (machines).
    pub nodes: usize,
    /// Devices per node.
    pub devices_per_node: usize,
    /// Memory of one device, in bytes.
    pub memory_bytes_per_device: u64,
    /// Link between two devices of the same node (per direction, per device).
    pub intra_node: LinkSpec,
    /// Link between devices on different nodes (per direction, per device); `None` for one node.
    pub inter_node: Option<LinkSpec>,
    /// Compute hints for the analytic profile; `None` when only measured profiles are used.
    pub compute: Option<ComputeHints>,
    /// Whether a rank's backward pass that ends while another rank of its machine is still in
    /// its backward pass waits for that one to end (file key `backward_waits_for_other_ranks`,
    /// default `false`).
    ///
    /// It does for ranks that are threads of one process on Burn 0.21.0's autodiff as
    /// published, which ends every backward pass by locking every autodiff graph of the process
    /// while a backward pass holds its own graph's lock as long as it runs, on CPU workers (they
    /// compute under that lock; GPU backends only queue kernels under it). megagraph's runtime
    /// builds with a patched autodiff that does not wait (`vendor/burn-autodiff/PATCHES.md`), so
    /// its clusters say `false`. With `true` the cost model's 1F1B schedule lets pipeline stages
    /// wait for each other ([`BackwardOverlap::WaitsForOthers`](crate::schedule::BackwardOverlap)).
    #[serde(default)]
    pub backward_waits_for_other_ranks: bool,
}

/// An alpha-beta link: `latency_seconds + bytes / bandwidth_bytes_per_second` per message.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Bandwidth of one direction of the link, in bytes per second.
    pub bandwidth_bytes_per_second: f64,
    /// Fixed cost of one message, in seconds.
    pub latency_seconds: f64,
}

/// Roofline hints of one device, used by
/// [`analytic_profile`](crate::profile::analytic_profile) to estimate times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeHints {
    /// Peak arithmetic rate for the training dtype, in FLOP/s.
    pub peak_flops: f64,
    /// Peak device-memory bandwidth, in bytes per second.
    pub memory_bandwidth_bytes_per_second: f64,
    /// Fraction of both peaks that real kernels reach, in `(0, 1]`.
    pub efficiency: f64,
    /// Shortest time of one kernel (launch and synchronization), in seconds.
    pub kernel_launch_seconds: f64,
}

/// Why a cluster file or request cannot be used. Line numbers are 1-based.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The file cannot be read.
    #[error("cannot read cluster file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key or a value of the wrong type.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Line of the offending text (0 when the parser gave no position).
        line: usize,
        /// Column of the offending text (0 when the parser gave no position).
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A required key is absent.
    #[error("{path}{}: missing field `{field}`", line.map(|l| format!(":{l}")).unwrap_or_default())]
    MissingField {
        /// The file.
        path: PathBuf,
        /// Dotted name of the field, e.g. `intra_node.latency_seconds`.
        field: String,
        /// Line of the table that lacks it (`None` for the top level).
        line: Option<usize>,
    },
    /// A value has the right type but is out of range.
    #[error("{path}:{line}: {field} = {value}: {reason}")]
    InvalidValue {
        /// The file.
        path: PathBuf,
        /// Dotted name of the field.
        field: String,
        /// Line of the value.
        line: usize,
        /// The value as written.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
    /// A cluster of several nodes has no `[inter_node]` link.
    #[error("{path}: nodes = {nodes} but there is no [inter_node] table")]
    MissingInterNode {
        /// The file.
        path: PathBuf,
        /// The node count.
        nodes: usize,
    },
    /// A sub-cluster of more devices than the cluster has, or not made of whole nodes.
    #[error(
        "cannot take {requested} devices from cluster `{cluster}` ({nodes} nodes x {devices_per_node} devices): \
         need at most one node's worth or a multiple of {devices_per_node} up to {available}"
    )]
    BadSubset {
        /// Name of the cluster.
        cluster: String,
        /// Requested device count.
        requested: usize,
        /// Devices of the cluster.
        available: usize,
        /// Nodes of the cluster.
        nodes: usize,
        /// Devices per node.
        devices_per_node: usize,
    },
}

impl LinkSpec {
    /// Seconds to move one message of `bytes` bytes over this link.
    pub fn transfer_seconds(&self, bytes: f64) -> f64 {
        self.latency_seconds + bytes / self.bandwidth_bytes_per_second
    }
}

impl ClusterSpec {
    /// Reads and validates a cluster file.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self, ClusterError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses and validates cluster TOML; `origin` names the text in errors.
    pub fn from_toml_str(text: &str, origin: impl AsRef<Path>) -> Result<Self, ClusterError> {
        let source = Source {
            text,
            path: origin.as_ref(),
        };
        let raw: RawCluster = toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map(|span| source.position(span.start))
                .unwrap_or((0, 0));
            ClusterError::Syntax {
                path: source.path.to_path_buf(),
                line,
                column,
                message: error.message().trim().to_string(),
            }
        })?;
        raw.into_spec(&source)
    }

    /// Number of devices: `nodes * devices_per_node`.
    pub fn devices(&self) -> usize {
        self.nodes * self.devices_per_node
    }

    /// The node that holds `rank`.
    pub fn node_of(&self, rank: usize) -> usize {
        rank / self.devices_per_node
    }

    /// The link between ranks `a` and `b`, and whether it crosses nodes.
    ///
    /// A cross-node pair on a cluster without `[inter_node]` (impossible after validation) falls
    /// back to the intra-node link.
    pub fn link_between(&self, a: usize, b: usize) -> (LinkSpec, bool) {
        if self.node_of(a) == self.node_of(b) {
            (self.intra_node, false)
        } else {
            (self.inter_node.unwrap_or(self.intra_node), true)
        }
    }

    /// The first `devices` devices of this cluster as a cluster of their own: part of one node, or
    /// whole nodes.
    pub fn first_devices(&self, devices: usize) -> Result<ClusterSpec, ClusterError> {
        let bad = || ClusterError::BadSubset {
            cluster: self.name.clone(),
            requested: devices,
            available: self.devices(),
            nodes: self.nodes,
            devices_per_node: self.devices_per_node,
        };
        if devices == 0 || devices > self.devices() {
            return Err(bad());
        }
        let mut subset = self.clone();
        if devices <= self.devices_per_node {
            subset.nodes = 1;
            subset.devices_per_node = devices;
        } else if devices.is_multiple_of(self.devices_per_node) {
            subset.nodes = devices / self.devices_per_node;
        } else {
            return Err(bad());
        }
        if subset.devices() != self.devices() {
            subset.name = format!("{} (first {devices} devices)", self.name);
        }
        Ok(subset)
    }
}

/// The text being parsed and its file name, for positions in errors.
struct Source<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Source<'_> {
    /// 1-based line and column of byte `offset`.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut end = offset.min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &self.text[..end];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit('\n')
            .next()
            .map_or(0, |tail| tail.chars().count())
            + 1;
        (line, column)
    }

    fn line(&self, span: &Range<usize>) -> usize {
        self.position(span.start).0
    }

    fn missing(&self, table: Option<(&str, &Range<usize>)>, field: &str) -> ClusterError {
        ClusterError::MissingField {
            path: self.path.to_path_buf(),
            field: match table {
                Some((name, _)) => format!("{name}.{field}"),
                None => field.to_string(),
            },
            line: table.map(|(_, span)| self.line(span)),
        }
    }

    fn invalid<T: std::fmt::Display>(
        &self,
        field: String,
        value: &Spanned<T>,
        reason: &'static str,
    ) -> ClusterError {
        ClusterError::InvalidValue {
            path: self.path.to_path_buf(),
            field,
            line: self.line(&value.span()),
            value: value.get_ref().to_string(),
            reason,
        }
    }

    /// A required count `>= 1`.
    fn count(&self, value: Option<Spanned<i64>>, field: &str) -> Result<usize, ClusterError> {
        let value = value.ok_or_else(|| self.missing(None, field))?;
        match usize::try_from(*value.get_ref()) {
            Ok(count) if count >= 1 => Ok(count),
            _ => Err(self.invalid(
                field.to_string(),
                &value,
                "must be an integer of at least 1",
            )),
        }
    }

    /// A required float satisfying `accept`.
    fn float(
        &self,
        table: (&str, &Range<usize>),
        value: Option<Spanned<f64>>,
        field: &str,
        accept: fn(f64) -> bool,
        reason: &'static str,
    ) -> Result<f64, ClusterError> {
        let value = value.ok_or_else(|| self.missing(Some(table), field))?;
        if value.get_ref().is_finite() && accept(*value.get_ref()) {
            Ok(*value.get_ref())
        } else {
            Err(self.invalid(format!("{}.{field}", table.0), &value, reason))
        }
    }

    fn link(&self, name: &str, raw: Spanned<RawLink>) -> Result<LinkSpec, ClusterError> {
        let span = raw.span();
        let table = (name, &span);
        let raw = raw.into_inner();
        Ok(LinkSpec {
            bandwidth_bytes_per_second: self.float(
                table,
                raw.bandwidth_bytes_per_second,
                "bandwidth_bytes_per_second",
                |v| v > 0.0,
                "must be a positive number of bytes per second",
            )?,
            latency_seconds: self.float(
                table,
                raw.latency_seconds,
                "latency_seconds",
                |v| v >= 0.0,
                "must be a non-negative number of seconds",
            )?,
        })
    }

    fn compute(&self, raw: Spanned<RawCompute>) -> Result<ComputeHints, ClusterError> {
        let span = raw.span();
        let table = ("compute", &span);
        let raw = raw.into_inner();
        Ok(ComputeHints {
            peak_flops: self.float(
                table,
                raw.peak_flops,
                "peak_flops",
                |v| v > 0.0,
                "must be positive",
            )?,
            memory_bandwidth_bytes_per_second: self.float(
                table,
                raw.memory_bandwidth_bytes_per_second,
                "memory_bandwidth_bytes_per_second",
                |v| v > 0.0,
                "must be positive",
            )?,
            efficiency: self.float(
                table,
                raw.efficiency,
                "efficiency",
                |v| v > 0.0 && v <= 1.0,
                "must be in (0, 1]",
            )?,
            kernel_launch_seconds: self.float(
                table,
                raw.kernel_launch_seconds,
                "kernel_launch_seconds",
                |v| v >= 0.0,
                "must be a non-negative number of seconds",
            )?,
        })
    }
}

/// The file as written, every value with its position, so that range errors can name the line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Option<Spanned<String>>,
    device: Option<Spanned<String>>,
    nodes: Option<Spanned<i64>>,
    devices_per_node: Option<Spanned<i64>>,
    memory_bytes_per_device: Option<Spanned<i64>>,
    intra_node: Option<Spanned<RawLink>>,
    inter_node: Option<Spanned<RawLink>>,
    compute: Option<Spanned<RawCompute>>,
    backward_waits_for_other_ranks: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    bandwidth_bytes_per_second: Option<Spanned<f64>>,
    latency_seconds: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompute {
    peak_flops: Option<Spanned<f64>>,
    memory_bandwidth_bytes_per_second: Option<Spanned<f64>>,
    efficiency: Option<Spanned<f64>>,
    kernel_launch_seconds: Option<Spanned<f64>>,
}

impl RawCluster {
    fn into_spec(self, source: &Source<'_>) -> Result<ClusterSpec, ClusterError> {
        let name = self
            .name
            .ok_or_else(|| source.missing(None, "name"))?
            .into_inner();
        let device = self
            .device
            .ok_or_else(|| source.missing(None, "device"))?
            .into_inner();
        let nodes = source.count(self.nodes, "nodes")?;
        let devices_per_node = source.count(self.devices_per_node, "devices_per_node")?;
        let memory = self
            .memory_bytes_per_device
            .ok_or_else(|| source.missing(None, "memory_bytes_per_device"))?;
        let memory_bytes_per_device = match u64::try_from(*memory.get_ref()) {
            Ok(bytes) if bytes > 0 => bytes,
            _ => {
                return Err(source.invalid(
                    "memory_bytes_per_device".to_string(),
                    &memory,
                    "must be a positive integer number of bytes",
                ));
            }
        };
        let intra = self
            .intra_node
            .ok_or_else(|| source.missing(None, "intra_node"))?;
        let intra_node = source.link("intra_node", intra)?;
        let inter_node = self
            .inter_node
            .map(|raw| source.link("inter_node", raw))
            .transpose()?;
        if nodes > 1 && inter_node.is_none() {
            return Err(ClusterError::MissingInterNode {
                path: source.path.to_path_buf(),
                nodes,
            });
        }
        let compute = self.compute.map(|raw| source.compute(raw)).transpose()?;
        Ok(ClusterSpec {
            name,
            device,
            nodes,
            devices_per_node,
            memory_bytes_per_device,
            intra_node,
            inter_node,
            compute,
            backward_waits_for_other_ranks: self.backward_waits_for_other_ranks.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests;

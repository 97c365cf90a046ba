//! The `[synthetic]` section of the training config: which generator makes the built-in
//! dataset, and its parameters.

use megagraph_graph::synthetic::{CsbmConfig, PowerLawConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// Which generator makes the built-in synthetic dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyntheticKind {
    /// A contextual stochastic block model: homophilous edges between planted classes
    /// (`"csbm"`, the default).
    #[default]
    Csbm,
    /// A Chung-Lu power-law graph (`"power_law"`) with balanced random classes and class-mean
    /// Gaussian features as in the CSBM (the edges carry no class signal): for scale tests.
    PowerLaw,
}

/// Synthetic dataset section (`[synthetic]`): a contextual stochastic block model or a
/// power-law graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticConfig {
    /// The generator: `"csbm"` (default) or `"power_law"`.
    pub kind: SyntheticKind,
    /// Number of nodes. Default: 2000.
    pub nodes: usize,
    /// Number of classes (blocks). Default: 5.
    pub classes: usize,
    /// Average degree, in `[0, nodes - 1]`. Default: 8.0.
    pub avg_degree: f64,
    /// Probability that an edge joins two nodes of the same class (`csbm` only). Default: 0.8.
    pub homophily: f64,
    /// Exponent of the degree distribution `P(k) ~ k^-exponent`, above 1 (`power_law` only).
    /// Default: 2.5.
    pub exponent: f64,
    /// Width of the node features.
    pub feature_dim: usize,
    /// Signal-to-noise ratio of the class means in the features.
    pub signal_to_noise: f64,
    /// Width of the edge features (`csbm` only; 0 = none): unit noise plus, on the first
    /// coordinate, `±signal_to_noise` for an intra-/inter-class edge, for
    /// `model.edge_encoding`. Default: 0.
    pub edge_feature_dim: usize,
    /// Fraction of the nodes in the training split, in (0, 1]. Default: 0.6. Under
    /// [`SCARCE_LABEL_FRACTION`](crate::SCARCE_LABEL_FRACTION) the run takes the scarce-label
    /// defaults ([`RunContext`](crate::RunContext)), as on Cora's public split.
    pub train_fraction: f64,
    /// Fraction of the nodes in the validation split; the rest is the test split. Default: 0.2.
    pub valid_fraction: f64,
    /// Seed of the generator (independent of `training.seed`, so the graph stays the same).
    pub seed: u64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        let csbm = CsbmConfig::default();
        Self {
            kind: SyntheticKind::default(),
            nodes: csbm.num_nodes,
            classes: csbm.num_classes,
            avg_degree: csbm.avg_degree,
            homophily: csbm.homophily,
            exponent: PowerLawConfig::default().exponent,
            feature_dim: csbm.feature_dim,
            signal_to_noise: csbm.signal_to_noise,
            edge_feature_dim: csbm.edge_feature_dim,
            train_fraction: csbm.train_fraction,
            valid_fraction: csbm.valid_fraction,
            seed: csbm.seed,
        }
    }
}

impl SyntheticConfig {
    /// The CSBM generator configuration (for `power_law`, the source of the labels, features
    /// and split).
    pub fn csbm(&self) -> CsbmConfig {
        CsbmConfig {
            num_nodes: self.nodes,
            num_classes: self.classes,
            avg_degree: self.avg_degree,
            homophily: self.homophily,
            feature_dim: self.feature_dim,
            signal_to_noise: self.signal_to_noise,
            edge_feature_dim: self.edge_feature_dim,
            train_fraction: self.train_fraction,
            valid_fraction: self.valid_fraction,
            seed: self.seed,
            ..CsbmConfig::default()
        }
    }

    /// The power-law graph generator configuration (`kind = "power_law"`).
    pub fn power_law(&self) -> PowerLawConfig {
        PowerLawConfig {
            num_nodes: self.nodes,
            avg_degree: self.avg_degree,
            exponent: self.exponent,
            seed: self.seed,
        }
    }

    /// Checks the fields the chosen generator uses, naming the field (`synthetic.nodes`, ...).
    pub(super) fn validate(&self) -> Result<()> {
        let invalid = |field, reason: String| Err(TrainError::InvalidConfig { field, reason });
        if self.nodes < 2 || self.nodes > u32::MAX as usize {
            return invalid(
                "synthetic.nodes",
                format!("must be in 2..={} (got {})", u32::MAX, self.nodes),
            );
        }
        if self.classes < 2 || self.nodes < 2 * self.classes {
            return invalid(
                "synthetic.classes",
                format!(
                    "needs at least 2 classes and at least 2 nodes per class (got {} classes for {} nodes)",
                    self.classes, self.nodes
                ),
            );
        }
        if !(self.avg_degree.is_finite() && self.avg_degree >= 0.0 && self.avg_degree < self.nodes as f64) {
            return invalid(
                "synthetic.avg_degree",
                format!(
                    "must be finite, >= 0 and below synthetic.nodes ({}), got {}",
                    self.nodes, self.avg_degree
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.homophily) {
            return invalid("synthetic.homophily", format!("must be in [0, 1], got {}", self.homophily));
        }
        if !(self.signal_to_noise.is_finite() && self.signal_to_noise >= 0.0) {
            return invalid(
                "synthetic.signal_to_noise",
                format!("must be finite and >= 0, got {}", self.signal_to_noise),
            );
        }
        if self.kind == SyntheticKind::PowerLaw && self.edge_feature_dim > 0 {
            return invalid(
                "synthetic.edge_feature_dim",
                "applies to kind = \"csbm\" only (the power-law graph has no edge features)".to_string(),
            );
        }
        if self.kind == SyntheticKind::PowerLaw && !(self.exponent.is_finite() && self.exponent > 1.0) {
            return invalid("synthetic.exponent", format!("must be finite and above 1, got {}", self.exponent));
        }
        if !(self.train_fraction > 0.0 && self.train_fraction <= 1.0) {
            return invalid("synthetic.train_fraction", format!("must be in (0, 1], got {}", self.train_fraction));
        }
        if !(self.valid_fraction >= 0.0 && self.train_fraction + self.valid_fraction <= 1.0 + 1e-9) {
            return invalid(
                "synthetic.valid_fraction",
                format!(
                    "must be >= 0 with train_fraction + valid_fraction at most 1, got {} + {}",
                    self.train_fraction, self.valid_fraction
                ),
            );
        }
        Ok(())
    }
}

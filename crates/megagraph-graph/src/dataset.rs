//! [`Dataset`]: a graph with node features, labels and a train/valid/test split.

use std::sync::Arc;

use crate::edge_features::EdgeFeatures;
use crate::graph::Graph;

/// Dense node features, row-major `[num_nodes, dim]`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFeatures {
    /// Number of rows (nodes).
    pub num_nodes: usize,
    /// Number of columns (feature dimension).
    pub dim: usize,
    /// `num_nodes * dim` values, row-major: node `v`'s features are `values[v * dim..(v + 1) * dim]`.
    pub values: Vec<f32>,
}

impl NodeFeatures {
    /// The feature row of `node`, shape `[dim]`.
    ///
    /// # Panics
    /// If `node >= num_nodes`.
    pub fn row(&self, node: usize) -> &[f32] {
        &self.values[node * self.dim..(node + 1) * self.dim]
    }
}

/// Node ids of the train, validation and test sets (each sorted ascending when produced by this
/// crate).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    /// Training nodes.
    pub train: Vec<u32>,
    /// Validation nodes.
    pub valid: Vec<u32>,
    /// Test nodes.
    pub test: Vec<u32>,
}

impl Split {
    /// The split of a node order cut in three: `order[..train_end]` for training,
    /// `order[train_end..valid_end]` for validation and the rest for test, each part sorted
    /// ascending.
    ///
    /// # Panics
    ///
    /// Unless `train_end <= valid_end <= order.len()`.
    pub(crate) fn from_order(order: &[u32], train_end: usize, valid_end: usize) -> Self {
        let sorted = |part: &[u32]| {
            let mut part = part.to_vec();
            part.sort_unstable();
            part
        };
        Self {
            train: sorted(&order[..train_end]),
            valid: sorted(&order[train_end..valid_end]),
            test: sorted(&order[valid_end..]),
        }
    }
}

/// A node-classification dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Dataset name (from `meta.json` `name`, else the folder name; `"csbm"` for synthetic data).
    pub name: String,
    /// The graph, shared (cloning a dataset, or handing the graph to a background index
    /// builder, copies no arcs).
    pub graph: Arc<Graph>,
    /// Node features `[N, dim]`, `None` when the dataset has none.
    pub features: Option<NodeFeatures>,
    /// Edge features, one row per arc of `graph` (see [`EdgeFeatures`]), `None` when the dataset
    /// has none.
    pub edge_features: Option<EdgeFeatures>,
    /// Class id per node, shape `[N]`; `-1` = unlabelled.
    pub labels: Vec<i64>,
    /// Number of classes: the largest label + 1.
    pub num_classes: usize,
    /// Train/valid/test node ids.
    pub split: Split,
}

impl Dataset {
    /// A dataset of `graph` whose `num_classes` is the largest label + 1 (0 when no node is
    /// labelled).
    pub(crate) fn from_labels(
        name: String,
        graph: Graph,
        features: Option<NodeFeatures>,
        labels: Vec<i64>,
        split: Split,
    ) -> Dataset {
        let num_classes = labels
            .iter()
            .copied()
            .max()
            .map_or(0, |m| m.saturating_add(1).max(0) as usize);
        Dataset {
            name,
            graph: Arc::new(graph),
            features,
            edge_features: None,
            labels,
            num_classes,
            split,
        }
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.graph.num_nodes()
    }

    /// Feature dimension (0 when there are no features).
    pub fn feature_dim(&self) -> usize {
        self.features.as_ref().map_or(0, |f| f.dim)
    }

    /// Edge feature dimension (0 when there are no edge features).
    pub fn edge_feature_dim(&self) -> usize {
        self.edge_features.as_ref().map_or(0, |f| f.dim)
    }

    /// Number of labelled nodes (label `>= 0`).
    pub fn num_labeled(&self) -> usize {
        self.labels.iter().filter(|&&l| l >= 0).count()
    }
}

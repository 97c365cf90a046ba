//! What is trained: the [`ModelShape`] of the Graph Transformer and the [`Workload`] (sequence
//! length, sequences per step, element size).

use serde::{Deserialize, Serialize};

/// The shape of a Graphormer-style Graph Transformer, as far as time and memory depend on it.
///
/// The model is an embedding stage (input linear `[feature_dim -> hidden]`, in- and out-degree
/// embeddings `[degree_buckets, hidden]` each, the spatial bias table
/// `[distance_buckets, heads]` shared by all layers), `layers` pre-LN layers (layer norm, Q/K/V/O
/// projections `[hidden, hidden]`, layer norm, FFN `[hidden -> ffn_hidden -> hidden]`) and a head (final
/// layer norm and a `[hidden -> num_classes]` classifier).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelShape {
    /// Number of transformer layers `L` (0 only in a [`ProfileKey`](crate::ProfileKey), which
    /// leaves it out of its JSON).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub layers: usize,
    /// Number of attention heads `H`; divides `hidden`.
    pub heads: usize,
    /// Model width `d`.
    pub hidden: usize,
    /// Hidden width of the feed-forward network (`ffn` in JSON).
    #[serde(rename = "ffn")]
    pub ffn_hidden: usize,
    /// Width of the node features (input of the input linear).
    pub feature_dim: usize,
    /// Number of output classes.
    pub num_classes: usize,
    /// Rows of the spatial bias table: shortest-path-distance buckets (`max_distance + 2`).
    pub distance_buckets: usize,
    /// Rows of each degree embedding (`max_degree + 1`).
    pub degree_buckets: usize,
    /// Key tile of the attention kernel: attention scores live as `[rows, key_tile, heads]` tiles,
    /// never as a `[seq, seq, heads]` tensor.
    pub key_tile: usize,
    /// Width of the edge features of Graphormer's edge encoding; 0 (left out of the JSON)
    /// without one. With an edge encoding the embedding stage also builds a `[heads, seq, seq]`
    /// bias per sequence (one shortest path of `distance_buckets - 2` hops per pair), so its
    /// cost grows with the square of the sequence length.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_feature_dim: usize,
}

fn is_zero(layers: &usize) -> bool {
    *layers == 0
}

/// The training workload: how long sequences are and how many make a step.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workload {
    /// Nodes per sequence `S`.
    pub seq_len: usize,
    /// Sequences per optimizer step, over all data-parallel replicas.
    pub sequences_per_step: usize,
    /// Bytes per element of parameters, gradients, optimizer moments and activations (4 for f32).
    pub dtype_bytes: usize,
    /// Pairs per query row that a sparse distance index stores (the nodes within
    /// `max_distance`, itself included; the mean over rows, rounded up). `None`: not known, and
    /// the index is counted dense (one byte per pair, the most it can take).
    #[serde(default)]
    pub near_pairs_per_row: Option<usize>,
}

/// A model shape or workload that cannot be planned for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// A size is zero.
    #[error("{field} is 0: it must be at least 1")]
    ZeroField {
        /// Name of the field.
        field: &'static str,
    },
    /// `hidden` is not a multiple of `heads`.
    #[error("heads = {heads} does not divide hidden = {hidden}")]
    HeadsDoNotDivideHidden {
        /// Attention heads.
        heads: usize,
        /// Model width.
        hidden: usize,
    },
    /// An element size other than 1, 2, 4 or 8 bytes.
    #[error("dtype_bytes = {dtype_bytes}: expected 1, 2, 4 or 8")]
    UnsupportedDtype {
        /// The element size.
        dtype_bytes: usize,
    },
}

impl ModelShape {
    /// The MegaGraph paper's model (16 layers, 8 heads, hidden = FFN = 64) with the model crate's
    /// defaults for the encodings (distances up to 4 → 6 buckets, degrees up to 64 → 65 buckets,
    /// key tile 128) and ogbn-products-sized input and output (100 features, 47 classes).
    pub fn paper() -> Self {
        Self {
            layers: 16,
            heads: 8,
            hidden: 64,
            ffn_hidden: 64,
            feature_dim: 100,
            num_classes: 47,
            distance_buckets: 6,
            degree_buckets: 65,
            key_tile: 128,
            edge_feature_dim: 0,
        }
    }

    /// Checks that every size is positive and `heads` divides `hidden`.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        for (field, value) in [
            ("layers", self.layers),
            ("heads", self.heads),
            ("hidden", self.hidden),
            ("ffn", self.ffn_hidden),
            ("feature_dim", self.feature_dim),
            ("num_classes", self.num_classes),
            ("distance_buckets", self.distance_buckets),
            ("degree_buckets", self.degree_buckets),
            ("key_tile", self.key_tile),
        ] {
            if value == 0 {
                return Err(WorkloadError::ZeroField { field });
            }
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(WorkloadError::HeadsDoNotDivideHidden {
                heads: self.heads,
                hidden: self.hidden,
            });
        }
        Ok(())
    }

    /// Parameters of the embedding stage without the spatial table: the input linear (weight and
    /// bias), the two degree embeddings and the edge encoding's per-hop weights, if any.
    pub fn embedding_parameters(&self) -> u64 {
        let (f, d, g) = (
            self.feature_dim as u64,
            self.hidden as u64,
            self.degree_buckets as u64,
        );
        f * d + d + 2 * g * d + (self.edge_feature_dim * self.edge_hops() * self.heads) as u64
    }

    /// Hops of the edge encoding's paths (`distance_buckets - 2`, the largest exact distance);
    /// 0 without an edge encoding.
    pub fn edge_hops(&self) -> usize {
        if self.edge_feature_dim == 0 {
            return 0;
        }
        self.distance_buckets.saturating_sub(2)
    }

    /// Parameters of the spatial bias table `[distance_buckets, heads]`. Every pipeline stage keeps
    /// a replica because every layer reads it.
    pub fn spatial_table_parameters(&self) -> u64 {
        (self.distance_buckets * self.heads) as u64
    }

    /// Parameters of one transformer layer: two layer norms, Q/K/V/O projections and the FFN, all
    /// with biases.
    pub fn layer_parameters(&self) -> u64 {
        let (d, f) = (self.hidden as u64, self.ffn_hidden as u64);
        2 * 2 * d + 4 * (d * d + d) + (d * f + f) + (f * d + d)
    }

    /// Parameters of the head: the final layer norm and the classifier.
    pub fn head_parameters(&self) -> u64 {
        let (d, c) = (self.hidden as u64, self.num_classes as u64);
        2 * d + d * c + c
    }

    /// All parameters of the model (one copy of the spatial table).
    pub fn parameters(&self) -> u64 {
        self.embedding_parameters()
            + self.spatial_table_parameters()
            + self.layers as u64 * self.layer_parameters()
            + self.head_parameters()
    }

    /// Width of one attention head (`hidden / heads`).
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }
}

impl Workload {
    /// Bytes of one query row of the distance index over the `seq_len` key columns, as the
    /// runtime holds it: the sparse row (a 4-byte column and a 1-byte bucket per stored pair,
    /// and a 4-byte row offset) when it stores fewer than a fifth of the pairs (the runtime's
    /// choice, `megagraph_kernels::sparse_is_smaller`, which this pure crate cannot call;
    /// `plan --validate` measures both against each other), else the dense row of `seq_len` bytes.
    pub fn index_row_bytes(&self) -> usize {
        match self.near_pairs_per_row {
            Some(stored) if stored.saturating_mul(5) < self.seq_len => 4 + 5 * stored,
            _ => self.seq_len,
        }
    }

    /// One rank's share of a micro-batch under a layout with `cp`, `dp` and `micro_batches`:
    /// `(sequences, rows per sequence)` = `(sequences_per_step / (dp · micro_batches), seq_len /
    /// cp)`.
    pub fn micro_batch(&self, cp: usize, dp: usize, micro_batches: usize) -> (usize, usize) {
        (self.sequences_per_step / (dp * micro_batches).max(1), self.seq_len / cp.max(1))
    }

    /// Bytes of the distance index one rank holds for one micro-batch
    /// ([`micro_batch`](Self::micro_batch)): its rows of
    /// [`index_row_bytes`](Self::index_row_bytes) each.
    pub fn index_bytes_per_micro_batch(&self, cp: usize, dp: usize, micro_batches: usize) -> u64 {
        let (sequences, block) = self.micro_batch(cp, dp, micro_batches);
        (sequences * block * self.index_row_bytes()) as u64
    }

    /// Checks that every size is positive and the element size is 1, 2, 4 or 8 bytes.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        for (field, value) in [
            ("seq_len", self.seq_len),
            ("sequences_per_step", self.sequences_per_step),
            ("dtype_bytes", self.dtype_bytes),
        ] {
            if value == 0 {
                return Err(WorkloadError::ZeroField { field });
            }
        }
        if ![1, 2, 4, 8].contains(&self.dtype_bytes) {
            return Err(WorkloadError::UnsupportedDtype {
                dtype_bytes: self.dtype_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_parameter_counts_match_the_layer_by_layer_sum() {
        let shape = ModelShape::paper();
        shape.validate().unwrap();
        // Layer: 2 layer norms (2 x 128), Q/K/V/O (4 x (4096 + 64)), FFN (4096 + 64 + 4096 + 64).
        assert_eq!(shape.layer_parameters(), 256 + 16_640 + 8_320);
        // Input linear 100 x 64 + 64, two 65 x 64 degree embeddings.
        assert_eq!(shape.embedding_parameters(), 6_400 + 64 + 8_320);
        assert_eq!(shape.spatial_table_parameters(), 48);
        assert_eq!(shape.head_parameters(), 128 + 64 * 47 + 47);
        assert_eq!(
            shape.parameters(),
            14_784 + 48 + 16 * 25_216 + 3_183,
            "total is embedding + table + layers + head"
        );
        assert_eq!(shape.head_dim(), 8);
    }

    #[test]
    fn validation_names_the_field() {
        let mut shape = ModelShape::paper();
        shape.heads = 7;
        assert_eq!(
            shape.validate(),
            Err(WorkloadError::HeadsDoNotDivideHidden {
                heads: 7,
                hidden: 64
            })
        );
        shape.heads = 0;
        assert_eq!(
            shape.validate(),
            Err(WorkloadError::ZeroField { field: "heads" })
        );
        let workload = Workload {
            seq_len: 1024,
            sequences_per_step: 4,
            dtype_bytes: 3,
            near_pairs_per_row: None,
        };
        assert_eq!(
            workload.validate(),
            Err(WorkloadError::UnsupportedDtype { dtype_bytes: 3 })
        );
    }
}

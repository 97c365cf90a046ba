//! [`ProfiledPart`]: the four parts a profile measures the model as.

use serde::{Deserialize, Serialize};

/// The profiled parts of the model (see [`ProfileTable`](super::ProfileTable)).
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

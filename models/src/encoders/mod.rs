//! Encoders that turn nodes and graph structure into model inputs.

mod centrality;
mod edge_encoding;
mod graph_token;
mod input;
mod label;
mod spatial;

pub use centrality::{CentralityEncoding, CentralityEncodingConfig};
pub use edge_encoding::{EdgeEncoding, EdgeEncodingConfig, EdgePaths};
pub use graph_token::{GraphToken, GraphTokenConfig};
pub use input::{InputEncoder, InputEncoderConfig};
pub use label::{LabelEncoding, LabelEncodingConfig};
pub use spatial::{SpatialEncoding, SpatialEncodingConfig};

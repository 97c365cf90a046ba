//! Encoders that turn nodes and graph structure into model inputs.

mod centrality;
mod input;
mod spatial;

pub use centrality::{CentralityEncoding, CentralityEncodingConfig};
pub use input::{InputEncoder, InputEncoderConfig};
pub use spatial::{SpatialEncoding, SpatialEncodingConfig};

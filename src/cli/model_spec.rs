//! The model flags of `megagraph plan` and `megagraph profile`.

use clap::Args;
use megagraph_calibrate::model_shape;
use megagraph_planner::ModelShape;
use megagraph_train::TrainConfig;

use super::ModelShapeArgs;

/// The model a plan or profile is for: a preset with overrides, and the data's widths. The
/// model defaults are `train`'s ([`megagraph_train::ModelConfig::default`]), so a plan made
/// with default flags fits `train --plan` with default flags.
#[derive(Debug, Args)]
pub struct ModelSpecArgs {
    /// The preset, layer count and widths (override the preset).
    #[command(flatten)]
    pub shape: ModelShapeArgs,
    /// Width of the node features (default: ogbn-products').
    #[arg(long, value_name = "F", default_value_t = 100)]
    pub feature_dim: usize,
    /// Number of classes (default: ogbn-products').
    #[arg(long, value_name = "C", default_value_t = 47)]
    pub classes: usize,
}

impl ModelSpecArgs {
    /// The model shape the flags describe: `train`'s model configuration
    /// ([`TrainConfig::model_config`]) with these flags.
    pub fn shape(&self) -> ModelShape {
        let mut config = TrainConfig::default();
        self.shape.apply(&mut config.model);
        model_shape(&config.model_config(Some(self.feature_dim), 1, self.classes))
    }
}

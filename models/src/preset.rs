use crate::GraphTransformerConfig;

/// Named model sizes; in config files by name (`preset = "paper"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelPreset {
    /// Sized to train in minutes on a 2-core CPU: 2 layers, 4 heads, hidden = FFN = 64 (the
    /// defaults of [`GraphTransformerConfig`]).
    #[default]
    Small,
    /// The MegaGraph paper's model: 16 layers, 8 heads, hidden = FFN = 64.
    Paper,
}

impl ModelPreset {
    /// All presets, with their names.
    pub const ALL: [(&'static str, ModelPreset); 2] = [("small", ModelPreset::Small), ("paper", ModelPreset::Paper)];

    /// The preset's name (`small`, `paper`).
    pub fn name(self) -> &'static str {
        match self {
            ModelPreset::Small => "small",
            ModelPreset::Paper => "paper",
        }
    }

    /// Looks a preset up by name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    /// Sets the preset's layers, heads and widths on `config`, keeping the data-dependent fields.
    pub fn apply(self, config: GraphTransformerConfig) -> GraphTransformerConfig {
        match self {
            ModelPreset::Small => {
                // the model's own defaults: defined once, in `GraphTransformerConfig`
                let defaults = GraphTransformerConfig::new(config.num_nodes, config.num_classes);
                config
                    .with_num_layers(defaults.num_layers)
                    .with_num_heads(defaults.num_heads)
                    .with_hidden(defaults.hidden)
                    .with_ffn_hidden(defaults.ffn_hidden)
            }
            ModelPreset::Paper => config
                .with_num_layers(16)
                .with_num_heads(8)
                .with_hidden(64)
                .with_ffn_hidden(64),
        }
    }
}

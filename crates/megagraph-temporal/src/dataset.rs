//! [`TemporalDataset`]: an event stream with its chronological split, from any source.

use std::path::PathBuf;

use megagraph_graph::temporal::{
    ChronologicalSplit, EventStream, InteractionConfig, SplitFractions, load_jodie, load_temporal_dir, load_tgl,
};

use crate::error::Result;

/// Where a temporal dataset comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum TemporalSource {
    /// The seeded synthetic user–item stream (the built-in default).
    Synthetic(InteractionConfig),
    /// The shared layout: `DIR/edges.csv.gz` and `DIR/meta.json`.
    Dir(PathBuf),
    /// A JODIE raw CSV (`user_id,item_id,timestamp,state_label,features...`).
    Jodie(PathBuf),
    /// TGL's `edges.csv` with an optional edge-feature CSV; its `ext_roll` split is used when
    /// present.
    Tgl {
        /// `edges.csv`.
        edges: PathBuf,
        /// One row of floats per event.
        features: Option<PathBuf>,
    },
}

/// An event stream and its split into training, validation and test events.
#[derive(Clone, Debug)]
pub struct TemporalDataset {
    /// A short name for reports.
    pub name: String,
    /// The events, sorted by time.
    pub stream: EventStream,
    /// Training, validation and test event ranges.
    pub split: ChronologicalSplit,
}

impl TemporalDataset {
    /// Loads `source` and splits it chronologically by `fractions` (TGL's file keeps its own
    /// split when it has one).
    pub fn load(source: &TemporalSource, fractions: SplitFractions) -> Result<Self> {
        let file_name = |path: &PathBuf| {
            path.file_stem()
                .or(path.file_name())
                .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
        };
        let (name, stream, roll) = match source {
            TemporalSource::Synthetic(config) => ("synthetic".to_string(), config.generate()?.events, None),
            TemporalSource::Dir(dir) => (file_name(dir), load_temporal_dir(dir)?, None),
            TemporalSource::Jodie(path) => (file_name(path), load_jodie(path)?.events, None),
            TemporalSource::Tgl { edges, features } => {
                let loaded = load_tgl(edges, features.as_deref())?;
                (file_name(edges), loaded.events, loaded.ext_roll)
            }
        };
        let split = match roll {
            Some(roll) => ChronologicalSplit::from_roll(&roll)?,
            None => ChronologicalSplit::new(stream.len(), fractions)?,
        };
        log::info!(
            "{name}: {} nodes, {} events (train {}, valid {}, test {})",
            stream.num_nodes(),
            stream.len(),
            split.train.len(),
            split.valid.len(),
            split.test.len()
        );
        Ok(Self { name, stream, split })
    }
}

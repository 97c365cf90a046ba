use megagraph_graph::distance::DistanceScope;
use megagraph_graph::sequence::SequenceStrategy;
use megagraph_graph::{CsbmConfig, Dataset, GraphOptions, LoadOptions, SelfLoops, default_cache_dir, load_ogb};

use crate::config::{DistanceKind, SequenceKind, SyntheticConfig, SyntheticKind, TrainConfig};
use crate::data::{SequenceDataset, SequenceOptions};
use crate::error::{Result, TrainError};
use crate::features::{row_normalized, with_propagated_hops};
use crate::progress::PrepareProgress;

/// Loads the dataset a configuration names: the directory in `data.dataset`, or the built-in
/// synthetic graph.
pub fn load_dataset(config: &TrainConfig) -> Result<Dataset> {
    let data = &config.data;
    let graph_options = GraphOptions {
        symmetrize: data.symmetrize,
        self_loops: SelfLoops::Remove,
    };
    match &data.dataset {
        Some(dir) => {
            let cache_dir = if data.no_cache {
                None
            } else {
                Some(data.cache_dir.clone().unwrap_or_else(default_cache_dir))
            };
            let options = LoadOptions {
                split_scheme: data.split.clone(),
                graph: graph_options,
                cache_dir,
            };
            Ok(load_ogb(dir, &options)?)
        }
        None => synthetic_dataset(&config.synthetic),
    }
}

/// The built-in synthetic dataset of a `[synthetic]` section. For `power_law`, the labels,
/// features and split are the CSBM's of the same nodes, classes and seed (generated without
/// edges) and the graph is the power-law graph: the edges carry no class signal.
fn synthetic_dataset(synthetic: &SyntheticConfig) -> Result<Dataset> {
    match synthetic.kind {
        SyntheticKind::Csbm => Ok(synthetic.csbm().generate()?),
        SyntheticKind::PowerLaw => {
            let graph = synthetic.power_law().generate()?;
            let planted = CsbmConfig {
                avg_degree: 0.0,
                ..synthetic.csbm()
            }
            .generate()?;
            Ok(Dataset {
                name: "power_law".into(),
                graph,
                ..planted
            })
        }
    }
}

/// Loads the dataset and turns it into sequences with distance indexes.
pub fn prepare(config: &TrainConfig) -> Result<SequenceDataset> {
    prepare_with_progress(config, &crate::Quiet)
}

/// [`prepare`], reporting the long steps (partitioning, distance indexes) to `progress`.
pub fn prepare_with_progress(config: &TrainConfig, progress: &dyn PrepareProgress) -> Result<SequenceDataset> {
    config.validate()?;
    let mut dataset = load_dataset(config)?;
    if let Some(features) = &dataset.features {
        let features = if config.data.normalize_features {
            &row_normalized(features)
        } else {
            features
        };
        dataset.features = Some(with_propagated_hops(&dataset.graph, features, config.data.feature_hops));
    }
    if dataset.split.train.is_empty() {
        return Err(TrainError::InvalidConfig {
            field: "data.split",
            reason: format!("dataset {} has no training nodes in this split", dataset.name),
        });
    }
    let data = &config.data;
    let options = SequenceOptions {
        seq_len: data.seq_len,
        strategy: match data.sequences {
            SequenceKind::Locality => SequenceStrategy::Locality,
            SequenceKind::Random => SequenceStrategy::Random,
        },
        max_distance: data.max_distance,
        scope: match data.distance_scope {
            DistanceKind::Graph => DistanceScope::Graph,
            DistanceKind::Induced => DistanceScope::Induced,
        },
        seed: config.training.seed,
    };
    SequenceDataset::with_progress(dataset, options, progress)
}

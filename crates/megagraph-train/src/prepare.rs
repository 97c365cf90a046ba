use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use megagraph_graph::distance::{BfsBudget, DistanceScope};
use megagraph_graph::ogb::load_ogb_with_progress;
use megagraph_graph::{
    CsbmConfig, Dataset, GraphOptions, LoadOptions, SelfLoops, default_cache_dir,
};

use crate::config::{DistanceKind, RunContext, SyntheticConfig, SyntheticKind, TrainConfig};
use crate::data::{SequenceDataset, SequenceOptions};
use crate::error::{Result, TrainError};
use crate::features::{propagated_features, row_normalized};
use crate::progress::PrepareProgress;

/// Loads the dataset a configuration names: the directory in `data.dataset`, or the built-in
/// synthetic graph.
pub fn load_dataset(config: &TrainConfig) -> Result<Dataset> {
    load_dataset_with_progress(config, &crate::Quiet)
}

/// [`load_dataset`], reporting the parse of an OGB edge file (step "loading edges", in MiB of
/// the file on disk) to `progress`; nothing is reported when the binary cache answers.
pub fn load_dataset_with_progress(
    config: &TrainConfig,
    progress: &dyn PrepareProgress,
) -> Result<Dataset> {
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
            let started = Once::new();
            let reported = AtomicU64::new(0);
            let loaded = load_ogb_with_progress(dir, &options, &|read, total| {
                started
                    .call_once(|| progress.start("loading edges", (total >> 20) as usize, "MiB"));
                let mib = read >> 20;
                let before = reported.fetch_max(mib, Ordering::Relaxed);
                if mib > before {
                    progress.advance((mib - before) as usize);
                }
            });
            if started.is_completed() {
                progress.finish();
            }
            Ok(loaded?)
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
                graph: graph.into(),
                // the planted edges are not the power-law graph's
                edge_features: None,
                ..planted
            })
        }
    }
}

/// Loads the dataset and turns it into sequences with distance indexes.
///
/// An unset `data.feature_hops` follows the run ([`TrainConfig::feature_hops`]): 0 on one device
/// where labels are scarce, since [`NodeClassificationTrainer`](crate::NodeClassificationTrainer)
/// then propagates the logits. burn-train's [`MegaGraphTrainer`](crate::MegaGraphTrainer) does
/// not: set it for that trainer (or prepare `config.resolved(RunContext::STANDARD)`).
pub fn prepare(config: &TrainConfig) -> Result<SequenceDataset> {
    prepare_with_progress(config, &crate::Quiet)
}

/// The training split's share of `dataset`'s nodes ([`RunContext::train_fraction`]).
pub fn train_fraction(dataset: &Dataset) -> f64 {
    dataset.split.train.len() as f64 / dataset.graph.num_nodes().max(1) as f64
}

/// [`prepare`], reporting the long steps (loading an OGB edge file, partitioning, distance
/// indexes) to `progress`.
pub fn prepare_with_progress(
    config: &TrainConfig,
    progress: &dyn PrepareProgress,
) -> Result<SequenceDataset> {
    config.validate()?;
    let mut dataset = load_dataset_with_progress(config, progress)?;
    // the defaults of the unset recipe fields follow the run (a multi-node run that is not a
    // mesh sets `data.feature_hops`: see `NodeClassificationTrainer::with_nodes`)
    let run = RunContext {
        parallel: config.mesh.is_parallel(),
        train_fraction: train_fraction(&dataset),
    };
    if let Some(features) = &dataset.features {
        let features = if config.data.normalize_features {
            &row_normalized(features)
        } else {
            features
        };
        dataset.features = Some(propagated_features(
            &dataset.graph,
            features,
            config.data.feature_propagation,
            config.feature_hops(run),
            config.data.ppr_alpha,
        ));
    }
    if dataset.split.train.is_empty() {
        return Err(TrainError::InvalidConfig {
            field: "data.split",
            reason: format!(
                "dataset {} has no training nodes in this split",
                dataset.name
            ),
        });
    }
    let data = &config.data;
    let options = SequenceOptions {
        seq_len: data.seq_len,
        strategy: data.sequences,
        max_distance: data.max_distance,
        scope: match data.distance_scope {
            DistanceKind::Graph => DistanceScope::Graph,
            DistanceKind::Induced => DistanceScope::Induced,
        },
        seed: config.training.seed,
        budget: BfsBudget {
            max_arcs_per_source: (data.max_bfs_arcs > 0).then_some(data.max_bfs_arcs),
        },
    };
    let mut sequences = SequenceDataset::with_progress(dataset, options, progress)?;
    if config.model.edge_encoding {
        sequences.with_edge_paths()?;
    }
    if config.attention.reorder {
        sequences.reorder_clusters(config.attention.clusters, config.training.seed)?;
    }
    Ok(sequences)
}

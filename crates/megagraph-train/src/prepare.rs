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
/// synthetic graph, with its split replaced by a random one drawn with the run's seed (or the
/// table's) when `data.class_split` or `data.ratio_split` is set.
pub fn load_dataset(config: &TrainConfig) -> Result<Dataset> {
    load_dataset_with_progress(config, &crate::Quiet)
}

/// [`load_dataset`], reporting the parse of an OGB edge file (step "loading edges", in MiB of
/// the file on disk) to `progress`; nothing is reported when the binary cache answers.
pub fn load_dataset_with_progress(
    config: &TrainConfig,
    progress: &dyn PrepareProgress,
) -> Result<Dataset> {
    let mut dataset = load_configured_dataset(config, progress)?;
    let run_seed = config.training.seed;
    let drawn = match (&config.data.class_split, &config.data.ratio_split) {
        (Some(class_split), _) => {
            let seed = class_split.seed_for(run_seed);
            Some((class_split.sizes().draw(&dataset.labels, seed)?, "class-balanced", seed))
        }
        (None, Some(ratio_split)) => {
            let seed = ratio_split.seed_for(run_seed);
            Some((ratio_split.shares().draw(&dataset.labels, seed)?, "ratio", seed))
        }
        (None, None) => None,
    };
    if let Some((split, kind, seed)) = drawn {
        log::info!(
            "{kind} random split of {} (seed {seed}): {} training, {} validation and {} test nodes",
            dataset.name,
            split.train.len(),
            split.valid.len(),
            split.test.len()
        );
        dataset.split = split;
    }
    Ok(dataset)
}

/// The dataset of `data.dataset` (or the synthetic one) with the split it comes with.
fn load_configured_dataset(config: &TrainConfig, progress: &dyn PrepareProgress) -> Result<Dataset> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClassSplitConfig, RatioSplitConfig};

    fn synthetic_with(class_split: Option<ClassSplitConfig>, seed: u64) -> TrainConfig {
        let mut config = TrainConfig::default();
        config.synthetic.nodes = 400;
        config.data.class_split = class_split;
        config.training.seed = seed;
        config
    }

    #[test]
    fn a_class_split_replaces_the_dataset_split_and_follows_the_run_seed() {
        let sizes = ClassSplitConfig {
            per_class: 4,
            valid: 50,
            test: 100,
            seed: None,
        };
        let own = load_dataset(&synthetic_with(None, 1)).unwrap();
        let drawn = load_dataset(&synthetic_with(Some(sizes), 1)).unwrap();
        assert_eq!(drawn.split, sizes.sizes().draw(&own.labels, 1).unwrap());
        assert_eq!(drawn.split.train.len(), 4 * own.num_classes);
        assert_ne!(drawn.split, own.split);
        // the run's seed draws another split; a fixed seed draws the same whatever the run's
        let other = load_dataset(&synthetic_with(Some(sizes), 2)).unwrap();
        assert_ne!(other.split.train, drawn.split.train);
        let fixed = ClassSplitConfig { seed: Some(1), ..sizes };
        assert_eq!(load_dataset(&synthetic_with(Some(fixed), 2)).unwrap().split, drawn.split);
        // scarce labels: the run context sees the drawn split
        assert!(train_fraction(&drawn) < crate::SCARCE_LABEL_FRACTION);
    }

    #[test]
    fn a_ratio_split_replaces_the_dataset_split() {
        let shares = RatioSplitConfig {
            train: 0.1,
            valid: 0.3,
            seed: Some(4),
        };
        let mut config = synthetic_with(None, 0);
        let own = load_dataset(&config).unwrap();
        config.data.ratio_split = Some(shares);
        let drawn = load_dataset(&config).unwrap();
        assert_eq!(drawn.split, shares.shares().draw(&own.labels, 4).unwrap());
        assert_eq!((drawn.split.train.len(), drawn.split.valid.len(), drawn.split.test.len()), (40, 120, 240));
    }

    #[test]
    fn a_class_split_larger_than_the_labels_is_a_typed_error() {
        let sizes = ClassSplitConfig {
            per_class: 4,
            valid: 300,
            test: 300,
            seed: None,
        };
        let err = load_dataset(&synthetic_with(Some(sizes), 0)).unwrap_err();
        assert!(
            matches!(err, TrainError::Graph(megagraph_graph::GraphError::SplitTooLarge { valid: 300, test: 300, .. })),
            "{err}"
        );
        assert!(err.to_string().contains("600"), "{err}");
    }
}

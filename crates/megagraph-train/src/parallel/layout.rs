//! The mesh layout of a run: a [`ParallelConfig`] from the `[mesh]` section, a plan file or the
//! planner, checked against the model and the data before any worker starts.

use std::path::Path;

use megagraph_models::GraphTransformerConfig;
use megagraph_parallel::{CpMode, ParallelConfig, ParallelConfigError, padded_len};
use megagraph_calibrate::model_shape;
use megagraph_planner::{ClusterSpec, Plan, PlanError, SearchOptions, Workload, plan_analytic};

use super::Machine;
use crate::config::MeshConfig;
use crate::error::{Result, TrainError};
use crate::mesh_plan::MeshPlan;

/// What a run's steps look like, as far as the layout must fit them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Nodes per sequence.
    pub seq_len: usize,
    /// Sequences per optimizer step (`training.batch_size`, at most the sequence count).
    pub sequences_per_step: usize,
    /// Sequences in the dataset: the last step of an epoch takes the remainder.
    pub num_sequences: usize,
    /// Processes of a multi-node run (1 = this one alone): data parallelism spans them.
    pub nodes: usize,
    /// Pairs per row a sparse distance index stores, when known
    /// ([`SequenceDataset::near_pairs_per_row`](crate::SequenceDataset::near_pairs_per_row)):
    /// the planner's memory model counts the index as the runtime holds it.
    pub near_pairs_per_row: Option<usize>,
}

impl StepShape {
    /// Sequences of the smallest step of an epoch (the last one when the batch size does not
    /// divide the sequence count).
    pub fn smallest_step(&self) -> usize {
        match self.num_sequences % self.sequences_per_step {
            0 => self.sequences_per_step,
            rest => rest,
        }
    }
}

/// The [`ParallelConfig`] that `mesh` asks for, for `model` and `steps`.
///
/// # Errors
///
/// [`TrainError::InvalidConfig`] naming the `[mesh]` field and the reason when the layout cannot
/// run (pp larger than the layers, stage layers that do not sum up, dp not dividing the batch,
/// a step of an epoch too small for `dp x micro_batches`, ...); [`TrainError::PlanFile`] for an
/// unreadable plan file; [`TrainError::Plan`] when planning fails.
pub fn resolve_layout(mesh: &MeshConfig, model: &GraphTransformerConfig, steps: StepShape) -> Result<ParallelConfig> {
    let layers = model.num_layers;
    let config = match &mesh.plan {
        Some(MeshPlan::Auto) => planned_for_cluster(mesh.cluster.as_deref(), mesh.cp_mode, model, steps)?,
        Some(MeshPlan::File(path)) => read_plan_file(path)?,
        None => from_fields(mesh, layers)?,
    };
    // `mesh.cp_mode` (or --cp-mode), when set, overrides the plan's mode
    let config = match mesh.cp_mode {
        Some(cp_mode) => config.with_cp_mode(cp_mode),
        None => config,
    };
    config
        .validate_heads(model.num_heads)
        .map_err(|error| layout_error(&error, false))?;
    // data parallelism spans the nodes: check the global layout
    let global = ParallelConfig {
        dp: config.dp * steps.nodes.max(1),
        ..config.clone()
    };
    global
        .validate(layers, padded_len(steps.seq_len, config.cp), steps.sequences_per_step)
        .map_err(|error| layout_error(&error, mesh.plan.is_some()))?;
    let smallest = steps.smallest_step();
    let chunks = global.dp * global.micro_batches;
    if smallest < chunks {
        let nodes = if steps.nodes > 1 {
            format!(" x {} nodes", steps.nodes)
        } else {
            String::new()
        };
        return Err(TrainError::InvalidConfig {
            field: "mesh.dp",
            reason: format!(
                "dp x micro_batches{nodes} = {chunks} is more than the {smallest} sequences of the last step of an \
                 epoch ({} sequences in steps of {}); choose a batch size whose remainder is at least {chunks} or \
                 smaller degrees",
                steps.num_sequences, steps.sequences_per_step
            ),
        });
    }
    Ok(config)
}

/// The explicit `[mesh]` fields as a configuration.
fn from_fields(mesh: &MeshConfig, layers: usize) -> Result<ParallelConfig> {
    match &mesh.stage_layers {
        Some(stage_layers) => Ok(ParallelConfig {
            pp: mesh.pp,
            cp: mesh.cp,
            dp: mesh.dp,
            micro_batches: mesh.micro_batches,
            stage_layers: stage_layers.clone(),
            cp_mode: CpMode::Ring,
        }),
        None => ParallelConfig::uniform(mesh.pp, mesh.cp, mesh.dp, mesh.micro_batches, layers)
            .map_err(|error| layout_error(&error, false)),
    }
}

/// A configuration error as the `[mesh]` field to change.
fn layout_error(error: &ParallelConfigError, planned: bool) -> TrainError {
    let field = if planned {
        "mesh.plan"
    } else {
        match error {
            ParallelConfigError::ZeroSize { field } => match *field {
                "pp" => "mesh.pp",
                "cp" => "mesh.cp",
                "dp" => "mesh.dp",
                "micro_batches" => "mesh.micro_batches",
                "seq_len" => "data.seq_len",
                "sequences_per_step" => "training.batch_size",
                _ => "model.layers",
            },
            ParallelConfigError::MoreStagesThanLayers { .. } => "mesh.pp",
            ParallelConfigError::StageCountMismatch { .. }
            | ParallelConfigError::EmptyStage { .. }
            | ParallelConfigError::LayerSumMismatch { .. } => "mesh.stage_layers",
            ParallelConfigError::ContextDoesNotDivideSequence { .. } => "mesh.cp",
            ParallelConfigError::DataDoesNotDivideSequences { .. } => "mesh.dp",
            ParallelConfigError::MicroBatchesDoNotDivide { .. } => "mesh.micro_batches",
            ParallelConfigError::HeadsNotMultipleOfContext { .. } | ParallelConfigError::DenseBiasWithUlysses { .. } => "mesh.cp_mode",
        }
    };
    let hint = if planned {
        " (the plan was made for another model or batch size: plan again with the same shape)"
    } else {
        ""
    };
    TrainError::InvalidConfig {
        field,
        reason: format!("does not fit: {error}{hint}"),
    }
}

/// The best plan of a `megagraph plan --json` file (or a file holding one plan).
fn read_plan_file(path: &Path) -> Result<ParallelConfig> {
    let error = |message: String| TrainError::PlanFile {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|err| error(err.to_string()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| error(format!("not JSON (line {}, column {}): {err}", err.line(), err.column())))?;
    let plan = value.get("best").cloned().unwrap_or(value);
    // a plan's layout fields are a `ParallelConfig`'s; its predictions are ignored
    let layout: ParallelConfig = serde_json::from_value(plan).map_err(|err| {
        error(format!(
            "no plan in it: {err} (expected `megagraph plan --json` output or an object with pp, cp, dp, micro_batches, stage_layers)"
        ))
    })?;
    log::info!(
        "plan {}: pp={} cp={} dp={} micro_batches={} stage_layers={:?} cp_mode={}",
        path.display(),
        layout.pp,
        layout.cp,
        layout.dp,
        layout.micro_batches,
        layout.stage_layers,
        layout.cp_mode
    );
    Ok(layout)
}

/// Plans for `cluster` (or this machine, [`Machine::detect`]) with the planner's analytic
/// profile.
fn planned_for_cluster(
    cluster: Option<&Path>,
    cp_mode: Option<CpMode>,
    model: &GraphTransformerConfig,
    steps: StepShape,
) -> Result<ParallelConfig> {
    let cluster = match cluster {
        Some(path) => ClusterSpec::from_toml_file(path).map_err(PlanError::from)?,
        None => Machine::detect().cluster()?,
    };
    let workload = Workload {
        seq_len: steps.seq_len,
        sequences_per_step: steps.sequences_per_step,
        dtype_bytes: 4,
        near_pairs_per_row: steps.near_pairs_per_row,
    };
    let options = SearchOptions {
        cp_mode,
        ..SearchOptions::default()
    };
    let report = plan_analytic(&cluster, &model_shape(model), &workload, &options)?;
    // the fastest plan whose chunks fill the smallest step of an epoch (the planner knows the
    // step, not the epoch's remainder)
    let chunks = |plan: &Plan| plan.layout.dp * steps.nodes.max(1) * plan.layout.micro_batches;
    let smallest = steps.smallest_step();
    let best = report
        .candidates
        .into_iter()
        .find(|plan| chunks(plan) <= smallest)
        .unwrap_or(report.best);
    log::info!(
        "planned for {}: predicted {:.3} s per step, bottleneck: {}",
        cluster.name,
        best.predicted.step_seconds,
        best.predicted.bottleneck
    );
    Ok(best.layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(layers: usize) -> GraphTransformerConfig {
        GraphTransformerConfig::new(100, 3).with_num_layers(layers)
    }

    const STEPS: StepShape = StepShape {
        seq_len: 16,
        sequences_per_step: 4,
        num_sequences: 10,
        nodes: 1,
        near_pairs_per_row: None,
    };


    fn field_of(result: Result<ParallelConfig>) -> &'static str {
        match result {
            Err(TrainError::InvalidConfig { field, .. }) => field,
            other => panic!("expected an invalid-config error, got {other:?}"),
        }
    }

    #[test]
    fn explicit_fields_become_a_uniform_split() {
        let config = resolve_layout(&MeshConfig::new(2, 2, 1, 2), &model(3), STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.stage_layers, vec![1, 2]);
        assert_eq!((config.pp, config.cp, config.dp, config.micro_batches), (2, 2, 1, 2));
    }

    #[test]
    fn impossible_layouts_name_the_field() {
        assert_eq!(field_of(resolve_layout(&MeshConfig::new(4, 1, 1, 1), &model(3), STEPS)), "mesh.pp");
        assert_eq!(field_of(resolve_layout(&MeshConfig::new(1, 1, 3, 1), &model(3), STEPS)), "mesh.dp");
        let uneven = MeshConfig {
            stage_layers: Some(vec![2, 2]),
            ..MeshConfig::new(2, 1, 1, 1)
        };
        assert_eq!(field_of(resolve_layout(&uneven, &model(3), STEPS)), "mesh.stage_layers");
        // 10 sequences in steps of 4: the last step has 2 < dp x micro_batches = 4
        let err = resolve_layout(&MeshConfig::new(1, 1, 2, 2), &model(3), STEPS);
        assert_eq!(field_of(err), "mesh.dp");
        // data parallelism over 3 nodes does not divide 4 sequences per step
        let three_nodes = StepShape { nodes: 3, ..STEPS };
        assert_eq!(field_of(resolve_layout(&MeshConfig::default(), &model(3), three_nodes)), "mesh.dp");
        let two_nodes = StepShape { nodes: 2, ..STEPS };
        let config = resolve_layout(&MeshConfig::default(), &model(3), two_nodes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.dp, 1, "dp stays per node");
    }

    #[test]
    fn plan_files_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("plan.json");
        let report = r#"{"best": {"pp": 2, "cp": 1, "dp": 2, "micro_batches": 1, "stage_layers": [2, 1],
            "predicted_step_seconds": 1.0, "predicted_peak_bytes_per_device": 10, "bottleneck": "x"}}"#;
        std::fs::write(&path, report).unwrap_or_else(|e| panic!("{e}"));
        let planned = MeshConfig {
            plan: Some(MeshPlan::File(path.clone())),
            ..MeshConfig::default()
        };
        let config = resolve_layout(&planned, &model(3), STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((config.pp, config.dp, config.stage_layers.clone()), (2, 2, vec![2, 1]));
        // a plan for another model is refused with the reason
        assert_eq!(field_of(resolve_layout(&planned, &model(5), STEPS)), "mesh.plan");

        std::fs::write(&path, "{\"best\": 3}").unwrap_or_else(|e| panic!("{e}"));
        match resolve_layout(&planned, &model(3), STEPS) {
            Err(TrainError::PlanFile { path: p, message }) => {
                assert_eq!(p, path);
                assert!(message.contains("no plan"), "{message}");
            }
            other => panic!("expected a plan-file error, got {other:?}"),
        }
    }

    #[test]
    fn a_plan_files_cp_mode_applies_unless_the_mesh_overrides_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("plan.json");
        let report = r#"{"best": {"pp": 1, "cp": 2, "dp": 1, "micro_batches": 1, "stage_layers": [3],
            "cp_mode": "ulysses", "predicted_step_seconds": 1.0, "predicted_peak_bytes_per_device": 10,
            "bottleneck": "x"}}"#;
        std::fs::write(&path, report).unwrap_or_else(|e| panic!("{e}"));
        let planned = MeshConfig {
            plan: Some(MeshPlan::File(path)),
            ..MeshConfig::default()
        };
        let config = resolve_layout(&planned, &model(3), STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((config.cp, config.cp_mode), (2, CpMode::Ulysses));
        let forced = MeshConfig {
            cp_mode: Some(CpMode::Ring),
            ..planned
        };
        let config = resolve_layout(&forced, &model(3), STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.cp_mode, CpMode::Ring);
        // without a plan: ring unless asked
        let fields = resolve_layout(&MeshConfig::new(1, 2, 1, 1), &model(3), STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fields.cp_mode, CpMode::Ring);
    }

    #[test]
    fn ulysses_with_heads_that_cp_does_not_divide_names_cp_mode() {
        let ulysses = MeshConfig {
            cp_mode: Some(CpMode::Ulysses),
            ..MeshConfig::new(1, 3, 1, 1)
        };
        let heads = model(3).num_heads;
        assert!(!heads.is_multiple_of(3), "the test needs a head count that 3 does not divide");
        assert_eq!(field_of(resolve_layout(&ulysses, &model(3), STEPS)), "mesh.cp_mode");
        let ring = MeshConfig {
            cp_mode: Some(CpMode::Ring),
            ..ulysses
        };
        assert!(resolve_layout(&ring, &model(3), STEPS).is_ok());
    }

    #[test]
    fn auto_plans_for_this_machine() {
        let auto = MeshConfig {
            plan: Some(MeshPlan::Auto),
            ..MeshConfig::default()
        };
        let config = resolve_layout(&auto, &model(2), STEPS).unwrap_or_else(|e| panic!("{e}"));
        let cores = Machine::detect().cores;
        assert!(config.world_size() >= 1 && config.world_size() <= cores, "{config:?} on {cores} cores");
        assert_eq!(config.stage_layers.iter().sum::<usize>(), 2);
    }
}

//! Training on a mesh of workers (`[mesh]` / `--pp --cp --dp`): with dropout 0 every epoch's
//! loss equals the single-device run's, checkpoints resume on another layout, and layouts that
//! cannot run are refused before anything starts.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use megagraph_train::{
    MeshConfig, NodeClassificationTrainer, Quiet, SequenceDataset, TrainConfig, TrainError, TrainReport, TrainObserver,
    prepare,
};

type B = Autodiff<Flex>;

/// The tests' base configuration with 512 nodes in sequences of 64: 8 sequences, steps of 4
/// (two per epoch), two layers of width 8.
fn config() -> TrainConfig {
    let mut config = crate::fixtures::tiny_config();
    config.synthetic.nodes = 512;
    config.synthetic.feature_dim = 8;
    // distances and the dropped pairs differ per sequence, so the mesh must reproduce them
    config.data.structure_dropout = 0.1;
    config.training.epochs = 3;
    config.training.batch_size = 4;
    config.model.layers = Some(2);
    config.model.hidden = Some(8);
    config.model.ffn_hidden = Some(8);
    config.optimizer.lr = Some(0.01);
    config
}

fn fit(config: &TrainConfig, data: &Arc<SequenceDataset>, observer: &mut dyn TrainObserver) -> Result<TrainReport, TrainError> {
    NodeClassificationTrainer::new(config, data.clone())
        .fit::<B>(&Default::default(), observer)
        .map(|outcome| outcome.report)
}

fn data(config: &TrainConfig) -> Arc<SequenceDataset> {
    let data = prepare(config).unwrap_or_else(|e| panic!("prepare: {e}"));
    assert_eq!(data.num_sequences(), 8);
    Arc::new(data)
}

fn assert_same_losses(label: &str, got: &TrainReport, want: &TrainReport) {
    assert_eq!(got.history.len(), want.history.len(), "{label}: epochs");
    for (g, w) in got.history.iter().zip(&want.history) {
        let relative = (g.loss - w.loss).abs() / w.loss.abs().max(1e-12);
        assert!(
            relative <= 1e-5,
            "{label}: epoch {} loss {} vs single device {} (relative {relative:.2e})",
            g.epoch,
            g.loss,
            w.loss
        );
    }
}

#[test]
fn every_layout_reproduces_the_single_device_losses() {
    let _turn = crate::turn();
    let base = config();
    let data = data(&base);
    let single = fit(&base, &data, &mut Quiet).unwrap_or_else(|e| panic!("single device: {e}"));
    assert!(single.history[2].loss < single.history[0].loss, "no learning: {:?}", single.history);
    for (pp, cp, dp, micro_batches) in [(2, 1, 1, 2), (1, 2, 1, 1), (1, 1, 2, 1), (2, 2, 1, 2), (1, 2, 2, 2)] {
        let mut parallel = base.clone();
        parallel.mesh = MeshConfig::new(pp, cp, dp, micro_batches);
        let label = format!("pp={pp} cp={cp} dp={dp} micro_batches={micro_batches}");
        let report = fit(&parallel, &data, &mut Quiet).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_same_losses(&label, &report, &single);
    }
    let mut uneven = base.clone();
    uneven.mesh = MeshConfig {
        stage_layers: Some(vec![1, 1]),
        ..MeshConfig::new(2, 1, 1, 4)
    };
    let report = fit(&uneven, &data, &mut Quiet).unwrap_or_else(|e| panic!("stage layers: {e}"));
    assert_same_losses("stage_layers [1, 1], 4 micro-batches", &report, &single);
}

#[test]
fn the_edge_encoding_on_a_mesh_reproduces_the_single_device_losses() {
    let _turn = crate::turn();
    let mut base = config();
    base.synthetic.edge_feature_dim = 4;
    base.model.edge_encoding = true;
    let data = data(&base);
    let single = fit(&base, &data, &mut Quiet).unwrap_or_else(|e| panic!("single device: {e}"));
    // with cp > 1 each ring rank builds its block's rows of the edge paths and of the bias
    for (pp, cp, dp, micro_batches) in [(2, 1, 1, 2), (2, 1, 2, 1), (1, 2, 1, 1), (2, 2, 1, 2)] {
        let mut parallel = base.clone();
        parallel.mesh = MeshConfig::new(pp, cp, dp, micro_batches);
        let label = format!("edge encoding, pp={pp} cp={cp} dp={dp} micro_batches={micro_batches}");
        let report = fit(&parallel, &data, &mut Quiet).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_same_losses(&label, &report, &single);
    }
    // Ulysses would send the bias through its all-to-all: the layout is refused, naming the mode
    let mut ulysses = base.clone();
    ulysses.mesh = MeshConfig {
        cp_mode: Some(megagraph_parallel::CpMode::Ulysses),
        ..MeshConfig::new(1, 2, 1, 1)
    };
    match NodeClassificationTrainer::new(&ulysses, data.clone()).layout() {
        Err(TrainError::InvalidConfig { field, reason }) => assert_eq!(field, "mesh.cp_mode", "{reason}"),
        other => panic!("ulysses with an edge encoding: expected a refusal, got {other:?}"),
    }
}

#[test]
fn unset_propagation_and_consistency_are_on_for_scarce_labels_on_one_device_and_off_on_a_mesh() {
    let _turn = crate::turn();
    let mut unset = config();
    unset.model.propagation_steps = None;
    unset.training.consistency_weight = None;
    // 5% of the nodes labelled for training, as on Cora's public split; the same inputs for
    // every run (unset, the hop features follow the propagation)
    unset.synthetic.train_fraction = 0.05;
    unset.data.feature_hops = Some(0);
    let data = data(&unset);
    let mut on = unset.clone();
    on.model.propagation_steps = Some(megagraph_train::DEFAULT_PROPAGATION_STEPS);
    on.training.consistency_weight = Some(megagraph_train::DEFAULT_CONSISTENCY_WEIGHT);
    let mut off = unset.clone();
    off.model.propagation_steps = Some(0);
    off.training.consistency_weight = Some(0.0);
    let single_unset = fit(&unset, &data, &mut Quiet).unwrap_or_else(|e| panic!("unset: {e}"));
    let single_on = fit(&on, &data, &mut Quiet).unwrap_or_else(|e| panic!("on: {e}"));
    let single_off = fit(&off, &data, &mut Quiet).unwrap_or_else(|e| panic!("off: {e}"));
    let losses = |report: &TrainReport| report.history.iter().map(|epoch| epoch.loss).collect::<Vec<_>>();
    assert_eq!(losses(&single_unset), losses(&single_on), "one device: unset is not the default");
    assert_ne!(losses(&single_unset), losses(&single_off), "one device: the defaults changed nothing");
    // a mesh runs an unset config without them, as one device does with both off
    let mut parallel = unset.clone();
    parallel.mesh = MeshConfig::new(1, 1, 2, 1);
    let report = fit(&parallel, &data, &mut Quiet).unwrap_or_else(|e| panic!("mesh: {e}"));
    assert_same_losses("dp=2, both unset", &report, &single_off);
    // set on a mesh, they are refused by name
    for (field, mut refused) in [("model.propagation_steps", on.clone()), ("training.consistency_weight", on)] {
        if field == "model.propagation_steps" {
            refused.training.consistency_weight = None;
        } else {
            refused.model.propagation_steps = None;
        }
        refused.mesh = MeshConfig::new(1, 1, 2, 1);
        match fit(&refused, &data, &mut Quiet) {
            Err(TrainError::InvalidConfig { field: got, .. }) => assert_eq!(got, field),
            other => panic!("{field} set on a mesh: expected a refusal, got {other:?}"),
        }
    }
}

/// An observer that interrupts training after `.0` epochs.
struct StopAfter(usize);

impl TrainObserver for StopAfter {
    fn should_stop(&mut self, epoch: usize) -> bool {
        epoch >= self.0
    }
}

#[test]
fn a_mesh_checkpoint_resumes_on_another_layout() {
    let _turn = crate::turn();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let base = config();
    let data = data(&base);
    let uninterrupted = fit(&base, &data, &mut Quiet).unwrap_or_else(|e| panic!("{e}"));

    let mut first = base.clone();
    first.training.checkpoint_dir = Some(dir.path().to_path_buf());
    first.mesh = MeshConfig::new(2, 1, 1, 2);
    let interrupted = fit(&first, &data, &mut StopAfter(2));
    assert!(
        matches!(interrupted, Err(TrainError::Interrupted { epoch: 2 })),
        "{:?}",
        interrupted.err()
    );

    let mut second = first.clone();
    second.training.resume = true;
    second.mesh = MeshConfig::new(1, 2, 2, 1);
    let resumed = fit(&second, &data, &mut Quiet).unwrap_or_else(|e| panic!("resume: {e}"));
    assert_eq!(resumed.epochs_run, 3);
    assert_same_losses("pp=2 then cp=2 dp=2", &resumed, &uninterrupted);
}

#[test]
fn layouts_that_cannot_run_are_refused_up_front() {
    let _turn = crate::turn();
    let base = config();
    let data = data(&base);
    let cases: [(&str, MeshConfig); 4] = [
        ("mesh.dp", MeshConfig::new(1, 1, 3, 1)),
        ("mesh.pp", MeshConfig::new(3, 1, 1, 1)),
        ("mesh.micro_batches", MeshConfig::new(1, 1, 2, 3)),
        (
            "mesh.stage_layers",
            MeshConfig {
                stage_layers: Some(vec![2, 1]),
                ..MeshConfig::new(2, 1, 1, 1)
            },
        ),
    ];
    for (field, layout) in cases {
        let mut bad = base.clone();
        bad.mesh = layout;
        let trainer = NodeClassificationTrainer::new(&bad, data.clone());
        match trainer.layout() {
            Err(TrainError::InvalidConfig { field: got, reason }) => {
                assert_eq!(got, field, "{reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{field}: expected a refusal, got {other:?}"),
        }
    }
}

//! A run stopped mid-epoch and resumed from its last checkpoint equals the uninterrupted run,
//! with one worker or several.

use burn::backend::{Autodiff, Flex};
use megagraph_graph::temporal::{InteractionConfig, SplitFractions};
use megagraph_models::temporal::TemporalPreset;
use megagraph_temporal::{
    Quiet, TemporalDataset, TemporalObserver, TemporalReport, TemporalScheme, TemporalSource,
    TemporalTrainConfig, TemporalTrainError, TemporalTrainer,
};

type B = Autodiff<Flex>;

/// Stops the run after `after` training batches (counted over all epochs).
struct StopAfter {
    after: usize,
    seen: usize,
}

impl TemporalObserver for StopAfter {
    fn batch_finished(&mut self, _loss: f64) {
        self.seen += 1;
    }

    fn should_stop(&mut self) -> bool {
        self.seen >= self.after
    }
}

/// Stops the run in epoch `epoch` (the workers report once per epoch, at its end).
struct StopInEpoch {
    epoch: usize,
    started: usize,
}

impl TemporalObserver for StopInEpoch {
    fn epoch_started(&mut self, epoch: usize, _batches: usize) {
        self.started = epoch;
    }

    fn should_stop(&mut self) -> bool {
        self.started >= self.epoch
    }
}

fn data() -> TemporalDataset {
    let source = TemporalSource::Synthetic(InteractionConfig {
        num_events: 1_500,
        ..InteractionConfig::small()
    });
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

fn config(model: TemporalPreset, dir: &std::path::Path) -> TemporalTrainConfig {
    TemporalTrainConfig {
        model,
        batch_size: 150,
        epochs: 3,
        patience: 3,
        learning_rate: 1e-3,
        dim: 8,
        mrr_negatives: 4,
        seed: 11,
        checkpoint_dir: Some(dir.to_path_buf()),
        ..TemporalTrainConfig::default()
    }
}

/// Everything but wall-clock figures.
fn outcome(report: &TemporalReport) -> String {
    let history: Vec<_> = report.history.iter().map(|e| (e.loss, e.valid_ap, e.valid_auc)).collect();
    format!(
        "{history:?} {} {} {:?} {}",
        report.test_ap, report.test_auc, report.test_mrr, report.best_epoch
    )
}

#[test]
fn a_run_killed_mid_epoch_and_resumed_equals_the_uninterrupted_run() {
    let _turn = crate::turn();
    let data = data();
    let device = Default::default();
    // 7 training batches per epoch: stop in the middle of the second epoch
    for model in [TemporalPreset::Tgn, TemporalPreset::Apan] {
        let whole_dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let whole = TemporalTrainer::new(&config(model, whole_dir.path()), &data)
            .fit::<B>(&device, &mut Quiet)
            .unwrap_or_else(|err| panic!("{err}"));
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let config = config(model, dir.path());
        match TemporalTrainer::new(&config, &data).fit::<B>(&device, &mut StopAfter { after: 10, seen: 0 }) {
            Err(TemporalTrainError::Interrupted { epoch }) => assert_eq!(epoch, 1),
            other => panic!("{model:?}: the run should stop in epoch 2: {other:?}"),
        }
        let resumed = TemporalTrainer::new(&config, &data)
            .with_resume(true)
            .fit::<B>(&device, &mut Quiet)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(resumed.history.len(), 3, "{model:?}");
        assert_eq!(outcome(&resumed), outcome(&whole), "{model:?}");
    }
}

#[test]
fn a_checkpoint_of_another_configuration_is_refused() {
    let _turn = crate::turn();
    let data = data();
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let mut config = config(TemporalPreset::Jodie, dir.path());
    config.epochs = 1;
    TemporalTrainer::new(&config, &data)
        .fit::<B>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|err| panic!("{err}"));
    config.dim = 4;
    let err = TemporalTrainer::new(&config, &data)
        .with_resume(true)
        .fit::<B>(&Default::default(), &mut Quiet)
        .expect_err("another width cannot resume this checkpoint");
    assert!(matches!(err, TemporalTrainError::Checkpoint { .. }), "{err}");
}

/// Several workers: killed in epoch 2, resumed from epoch 1's checkpoint, the run equals the
/// uninterrupted one (without dropout, whose draws follow the workers' varying turns). The
/// DepBloom run resumes with the critical-path optimization switched off: it is exact, so the
/// checkpoint accepts either.
#[test]
fn a_multi_worker_run_killed_and_resumed_equals_the_uninterrupted_run() {
    let _turn = crate::turn();
    let data = data();
    let device = Default::default();
    for scheme in [TemporalScheme::Depbloom, TemporalScheme::Minibatch] {
        let config = |dir: &std::path::Path| TemporalTrainConfig {
            workers: 2,
            scheme: Some(scheme),
            dropout: 0.0,
            window: Some(300),
            ..config(TemporalPreset::Tgn, dir)
        };
        let whole_dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let whole = TemporalTrainer::new(&config(whole_dir.path()), &data)
            .fit::<B>(&device, &mut Quiet)
            .unwrap_or_else(|err| panic!("{err}"));
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let killed = config(dir.path());
        match TemporalTrainer::new(&killed, &data).fit::<B>(&device, &mut StopInEpoch { epoch: 2, started: 0 }) {
            Err(TemporalTrainError::Interrupted { epoch }) => assert_eq!(epoch, 1),
            other => panic!("{scheme:?}: the run should stop in epoch 2: {other:?}"),
        }
        let resumed_config = TemporalTrainConfig {
            critical_path: Some(false),
            ..killed
        };
        let resumed = TemporalTrainer::new(&resumed_config, &data)
            .with_resume(true)
            .fit::<B>(&device, &mut Quiet)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(resumed.history.len(), 3, "{scheme:?}");
        assert_eq!(outcome(&resumed), outcome(&whole), "{scheme:?}");
    }
}

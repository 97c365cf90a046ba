//! Multi-worker temporal training: every scheme at one worker is single-worker training
//! exactly (losses, validation and test AP, parameters), and several workers keep equal model
//! replicas (checked by the trainer after every epoch: a divergence fails the run) while they
//! count the memory they synchronize, and repeat a seeded run exactly.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::Tensor;
use megagraph_graph::temporal::{InteractionConfig, SplitFractions};
use megagraph_models::temporal::{TemporalModel, TemporalPreset};
use megagraph_temporal::{
    Quiet, TemporalDataset, TemporalReport, TemporalScheme, TemporalSource, TemporalTrainConfig, TemporalTrainer,
};

type B = Autodiff<Flex>;

fn data() -> TemporalDataset {
    let source = TemporalSource::Synthetic(InteractionConfig {
        num_events: 1_000,
        ..InteractionConfig::small()
    });
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

fn config(model: TemporalPreset, scheme: Option<TemporalScheme>, workers: usize) -> TemporalTrainConfig {
    TemporalTrainConfig {
        model,
        batch_size: 40,
        // a multiple of the batch: one DepBloom worker then cuts the batches a single one cuts
        window: Some(160),
        epochs: 2,
        patience: 5,
        dim: 8,
        dropout: 0.1,
        mrr_negatives: 0,
        seed: 3,
        workers,
        scheme,
        ..TemporalTrainConfig::default()
    }
}

/// Every float parameter of `module`.
fn parameters<M: Module<Flex>>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl ModuleVisitor<Flex> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Flex, D>>) {
            self.0.extend(param.val().into_data().iter::<f32>());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// The report and the last epoch's parameters (read back from its checkpoint).
fn run(data: &TemporalDataset, config: &TemporalTrainConfig) -> (TemporalReport, Vec<f32>) {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let config = TemporalTrainConfig {
        checkpoint_dir: Some(dir.path().to_path_buf()),
        ..config.clone()
    };
    let report = TemporalTrainer::new(&config, data)
        .fit::<B>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|err| panic!("{:?} x {}: {err}", config.scheme, config.workers));
    let device = Default::default();
    let blank: TemporalModel<Flex> = config
        .model_config(data.stream.num_nodes(), data.stream.edge_feature_dim())
        .init(&device);
    let path = dir.path().join(format!("epoch-{:06}", config.epochs)).join("model");
    let model = blank
        .load_file(path, &NamedMpkFileRecorder::<FullPrecisionSettings>::new(), &device)
        .unwrap_or_else(|err| panic!("{err}"));
    (report, parameters(&model))
}

#[test]
fn every_scheme_at_one_worker_is_single_worker_training() {
    let _turn = crate::turn();
    let data = data();
    for model in [TemporalPreset::Tgn, TemporalPreset::Apan] {
        let (single, single_parameters) = run(&data, &config(model, None, 1));
        for (name, scheme) in TemporalScheme::ALL {
            let (report, parameters) = run(&data, &config(model, Some(scheme), 1));
            let losses = |r: &TemporalReport| r.history.iter().map(|e| (e.loss, e.valid_ap)).collect::<Vec<_>>();
            assert_eq!(
                losses(&report),
                losses(&single),
                "{model:?} {name}: losses and validation APs"
            );
            assert_eq!(report.test_ap, single.test_ap, "{model:?} {name}: test AP");
            assert_eq!(parameters, single_parameters, "{model:?} {name}: parameters");
            assert_eq!(
                report.sync_bytes_per_epoch, 0.0,
                "{model:?} {name}: one worker synchronizes nothing"
            );
            assert_eq!(report.events_per_worker, vec![data.split.train.len()]);
        }
    }
}

#[test]
fn several_workers_keep_equal_replicas_and_count_what_they_synchronize() {
    let _turn = crate::turn();
    let data = data();
    let train = data.split.train.len();
    for (scheme, workers) in [
        (TemporalScheme::Minibatch, 2),
        (TemporalScheme::Depbloom, 2),
        (TemporalScheme::Memory, 2),
        (TemporalScheme::Epoch, 2),
        (TemporalScheme::Minibatch, 3),
    ] {
        let (report, _) = run(&data, &config(TemporalPreset::Tgn, Some(scheme), workers));
        let name = format!("{} x {workers}", scheme.name());
        assert_eq!(report.workers, workers, "{name}");
        assert_eq!(report.scheme, Some(scheme), "{name}");
        assert_eq!(report.events_per_worker.len(), workers, "{name}");
        let events: usize = report.events_per_worker.iter().sum();
        match scheme {
            TemporalScheme::Epoch => assert_eq!(events, workers * train, "{name}: each worker runs every batch"),
            _ => assert_eq!(events, train, "{name}: the workers share the epoch's events"),
        }
        match scheme {
            TemporalScheme::Memory => assert_eq!(report.sync_bytes_per_epoch, 0.0, "{name}: private memories"),
            _ => assert!(report.sync_bytes_per_epoch > 0.0, "{name}: memory rows are exchanged"),
        }
        assert!(report.critical_path_seconds_per_batch > 0.0, "{name}");
        assert!(
            report.test_ap.is_finite() && report.history.iter().all(|e| e.loss.is_finite()),
            "{name}"
        );
    }
}

#[test]
fn several_workers_repeat_a_seeded_run_exactly() {
    let _turn = crate::turn();
    let data = data();
    for scheme in [TemporalScheme::Minibatch, TemporalScheme::Depbloom, TemporalScheme::Epoch] {
        // dropout that matters: each batch's masks come from its own key, not from the order in
        // which the workers reach the backend's one generator
        let config = TemporalTrainConfig {
            dropout: 0.3,
            ..config(TemporalPreset::Tgn, Some(scheme), 2)
        };
        let (first, first_parameters) = run(&data, &config);
        let (second, second_parameters) = run(&data, &config);
        let name = scheme.name();
        let curve = |r: &TemporalReport| r.history.iter().map(|e| (e.loss, e.valid_ap)).collect::<Vec<_>>();
        assert_eq!(curve(&first), curve(&second), "{name} x 2: losses and validation APs");
        assert_eq!(first.test_ap, second.test_ap, "{name} x 2: test AP");
        assert_eq!(first_parameters, second_parameters, "{name} x 2: parameters");
    }
}

//! End-to-end training on small synthetic graphs: learning happens, runs are reproducible,
//! checkpoints resume exactly, bad configurations are refused.

use burn::backend::{Autodiff, Flex};
use megagraph_train::{
    NodeClassificationTrainer, Quiet, SplitAccuracy, SplitRole, SyntheticKind, TrainConfig, TrainError, TrainReport, prepare,
};

fn tiny_config() -> TrainConfig {
    let mut config = crate::fixtures::tiny_config();
    config.training.epochs = 6;
    config.training.batch_size = 2;
    // Light regularization: these tests check learning and bookkeeping, not generalization.
    config.model.dropout = 0.1;
    config.model.input_dropout = Some(0.1);
    config.model.key_dropout = Some(0.2);
    config.optimizer.lr = Some(0.01);
    config
}

fn run(config: &TrainConfig) -> TrainReport {
    let data = prepare(config).expect("prepare");
    NodeClassificationTrainer::new(config, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .expect("train")
        .report
}

fn without_times(mut report: TrainReport) -> TrainReport {
    report.train_seconds = 0.0;
    report.seconds_per_epoch = 0.0;
    report.peak_rss_bytes = None;
    report.rank_peak_bytes.clear();
    report.partition_seconds = 0.0;
    report.index_seconds = 0.0;
    report.step_seconds.clear();
    for m in &mut report.history {
        m.seconds = 0.0;
    }
    report
}

#[test]
fn learns_the_synthetic_graph_better_than_chance() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 30;
    let report = run(&config);
    assert_eq!(report.epochs_run, 30);
    let first = report.history[0].loss;
    let last = report.history.last().unwrap().loss;
    assert!(last < first, "loss did not decrease: {first} -> {last}");
    // the validation cross-entropy starts near chance's ln 3 and falls below it
    let valid_losses: Vec<f64> = report.history.iter().map(|m| m.valid_loss).collect();
    assert!(valid_losses.iter().all(|l| l.is_finite() && *l > 0.0), "validation losses {valid_losses:?}");
    let best = &report.history[report.best_epoch - 1];
    assert!(best.valid_loss < 3f64.ln() && best.valid_loss < valid_losses[0], "validation losses {valid_losses:?}");
    assert!(report.test_accuracy > 0.6, "test accuracy {} (chance 0.33)", report.test_accuracy);
    assert!(report.params > 0 && report.nodes == 300 && report.edges > 0);
}

#[test]
fn the_same_seed_gives_identical_metrics() {
    let _turn = crate::turn();
    let config = tiny_config();
    assert_eq!(without_times(run(&config)), without_times(run(&config)));
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one() {
    let _turn = crate::turn();
    let dir = tempfile::tempdir().unwrap();
    let full = run(&tiny_config());

    let mut first_half = tiny_config();
    first_half.training.checkpoint_dir = Some(dir.path().to_path_buf());
    // Interrupted after 3 of 6 epochs (like a killed process), then resumed.
    let data = prepare(&first_half).unwrap();
    let mut stop_after_three = StopAfter(3);
    let interrupted = NodeClassificationTrainer::new(&first_half, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut stop_after_three);
    assert!(matches!(interrupted, Err(TrainError::Interrupted { epoch: 3 })), "{:?}", interrupted.err());

    let mut resumed = first_half.clone();
    resumed.training.resume = true;
    let resumed = run(&resumed);
    assert_eq!(without_times(resumed), without_times(full));
}

/// An observer that interrupts training after `.0` epochs.
struct StopAfter(usize);

impl megagraph_train::TrainObserver for StopAfter {
    fn should_stop(&mut self, epoch: usize) -> bool {
        epoch >= self.0
    }
}

#[test]
fn resume_with_another_configuration_is_refused() {
    let _turn = crate::turn();
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny_config();
    config.training.checkpoint_dir = Some(dir.path().to_path_buf());
    config.training.epochs = 1;
    run(&config);
    config.training.resume = true;
    config.model.hidden = Some(32);
    let data = prepare(&config).unwrap();
    let err = NodeClassificationTrainer::new(&config, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .err()
        .expect("a different configuration must not resume");
    assert!(matches!(err, TrainError::Checkpoint { .. }), "{err}");
}

/// A field's name and a change that makes it invalid.
type InvalidField = (&'static str, fn(&mut TrainConfig));

#[test]
fn invalid_configurations_name_the_field() {
    let _turn = crate::turn();
    let cases: [InvalidField; 10] = [
        ("model.dropout", |c| c.model.dropout = 1.5),
        ("training.max_steps", |c| c.training.max_steps = Some(0)),
        ("synthetic.nodes", |c| c.synthetic.nodes = 0),
        ("synthetic.classes", |c| c.synthetic.classes = 0),
        ("synthetic.avg_degree", |c| c.synthetic.avg_degree = 300.0),
        ("synthetic.avg_degree", |c| {
            c.synthetic.kind = SyntheticKind::PowerLaw;
            c.synthetic.avg_degree = f64::NAN;
        }),
        ("synthetic.exponent", |c| {
            c.synthetic.kind = SyntheticKind::PowerLaw;
            c.synthetic.exponent = 1.0;
        }),
        ("data.seq_len", |c| c.data.seq_len = 1),
        ("training.epochs", |c| c.training.epochs = 0),
        ("model.hidden", |c| {
            c.model.hidden = Some(30);
            c.model.heads = Some(4);
        }),
    ];
    for (field, mutate) in cases {
        let mut config = tiny_config();
        mutate(&mut config);
        match prepare(&config) {
            Err(TrainError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected InvalidConfig, got {:?}", other.err()),
        }
    }
}

#[test]
fn config_files_report_the_line_of_an_error() {
    let _turn = crate::turn();
    let err = TrainConfig::from_toml_str("[data]\nseq_len = 64\n\n[model]\nlayers = \"two\"\n").unwrap_err();
    assert!(err.contains("line 5"), "{err}");
    let err = TrainConfig::from_toml_str("[training]\nepoch = 3\n").unwrap_err();
    assert!(err.contains("line 2") && err.contains("epoch"), "{err}");
    let parsed = TrainConfig::from_toml_str("[training]\nepochs = 3\n[model]\npreset = \"paper\"\n").unwrap();
    assert_eq!(parsed.training.epochs, 3);
    assert_eq!(parsed.model_config(None, 10, 2).num_layers, 16);
    let err = TrainConfig::from_toml_str("[model]\npreset = \"huge\"\n").unwrap_err();
    assert!(err.contains("line 2") && err.contains("small") && err.contains("paper"), "{err}");
}

#[test]
fn max_steps_stops_after_that_many_steps_across_epochs() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    // 300 nodes / seq_len 64 = 5 sequences, batch 2: 3 steps per epoch.
    config.training.max_steps = Some(1);
    let one = run(&config);
    assert_eq!((one.steps, one.epochs_run, one.history.len()), (1, 1, 1), "{}", one.stopped);
    assert!(one.stopped.contains("max_steps"), "{}", one.stopped);
    config.training.max_steps = Some(4);
    let four = run(&config);
    assert_eq!((four.steps, four.epochs_run), (4, 2), "{}", four.stopped);
    // one wall-clock time per step, across epochs
    assert_eq!(four.step_seconds.len(), 4);
    assert!(four.step_seconds.iter().all(|s| s.is_finite() && *s > 0.0), "{:?}", four.step_seconds);
    config.training.max_steps = None;
    let all = run(&config);
    assert_eq!((all.steps, all.epochs_run), (18, 6));
}

#[test]
fn the_power_law_kind_trains_on_a_power_law_graph() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.synthetic.kind = SyntheticKind::PowerLaw;
    config.synthetic.avg_degree = 6.0;
    config.training.epochs = 2;
    let data = prepare(&config).expect("prepare");
    let ds = &data.dataset;
    assert_eq!((ds.name.as_str(), ds.num_nodes(), ds.num_classes), ("power_law", 300, 3));
    assert_eq!(*ds.graph, config.synthetic.power_law().generate().expect("power law"));
    let report = run(&config);
    assert_eq!((report.dataset.as_str(), report.epochs_run), ("power_law", 2));
    let parsed = TrainConfig::from_toml_str("[synthetic]\nkind = \"power_law\"\nexponent = 2.1\n").unwrap();
    assert_eq!((parsed.synthetic.kind, parsed.synthetic.exponent), (SyntheticKind::PowerLaw, 2.1));
    assert_eq!(TrainConfig::default().synthetic.kind, SyntheticKind::Csbm);
    assert!(TrainConfig::from_toml_str("[synthetic]\nkind = \"powerlaw\"\n").is_err());
}

#[test]
fn correct_and_smooth_picks_the_best_epoch_on_its_own_predictions_and_reads_no_test_labels() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 4;
    config.training.correct_smooth = true;
    let device = Default::default();
    let outcome = NodeClassificationTrainer::new(&config, prepare(&config).expect("prepare"))
        .fit::<Autodiff<Flex>>(&device, &mut Quiet)
        .expect("train");
    let report = outcome.report;
    let evaluate = |config: &TrainConfig, relabel| evaluate_relabelled(config, &outcome.model, relabel);
    let post_processed = evaluate(&config, None);
    // the best epoch was chosen on the post-processed validation accuracy
    assert_eq!(post_processed.valid, report.best_valid_accuracy);
    assert_eq!(post_processed.test, report.test_accuracy);
    let mut plain = config.clone();
    plain.training.correct_smooth = false;
    assert_ne!(evaluate(&plain, None), post_processed, "Correct & Smooth changed no prediction");
    // other test labels move the test accuracy only, other validation labels the validation
    // accuracy only: the predictions read neither
    let test_relabelled = evaluate(&config, Some(SplitRole::Test));
    assert_eq!((test_relabelled.train, test_relabelled.valid), (post_processed.train, post_processed.valid));
    assert_ne!(test_relabelled.test, post_processed.test);
    let valid_relabelled = evaluate(&config, Some(SplitRole::Valid));
    assert_eq!((valid_relabelled.train, valid_relabelled.test), (post_processed.train, post_processed.test));
    assert_ne!(valid_relabelled.valid, post_processed.valid);
}

#[test]
fn propagation_and_consistency_train_and_the_report_reads_the_whole_graph_propagation() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 4;
    config.model.dropout = 0.3;
    config.model.propagation_steps = Some(5);
    // the same inputs with and without the propagation (unset, the hop features follow it)
    config.data.feature_hops = Some(0);
    config.training.consistency_weight = Some(1.0);
    trains_and_the_report_reads_it(&config, |plain| plain.model.propagation_steps = Some(0));
}

#[test]
fn random_propagation_trains_and_the_report_reads_the_propagated_rows() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 3;
    config.model.node_dropout = 0.5;
    config.model.input_propagation_steps = 3;
    trains_and_the_report_reads_it(&config, |plain| plain.model.input_propagation_steps = 0);
}

/// Trains `config` (finite losses), checks that evaluating the best model with `config` gives the
/// report's accuracies, and that evaluating it with `switch_off` applied to `config` changes them.
fn trains_and_the_report_reads_it(config: &TrainConfig, switch_off: impl FnOnce(&mut TrainConfig)) {
    let device = Default::default();
    let outcome = NodeClassificationTrainer::new(config, prepare(config).expect("prepare"))
        .fit::<Autodiff<Flex>>(&device, &mut Quiet)
        .expect("train");
    let report = outcome.report;
    assert!(report.history.iter().all(|epoch| epoch.loss.is_finite()), "{:?}", report.history);
    let evaluate = |config: &TrainConfig| {
        let data = prepare(config).expect("prepare");
        let batches = every_sequence(&data, config.training.batch_size);
        NodeClassificationTrainer::new(config, data).evaluate(&outcome.model, &batches, &device)
    };
    let on = evaluate(config);
    assert_eq!((on.valid, on.test), (report.best_valid_accuracy, report.test_accuracy));
    let mut plain = config.clone();
    switch_off(&mut plain);
    assert_ne!(evaluate(&plain), on, "switching it off changed no prediction");
}

/// The accuracies of `model` on `config`'s data with the labels of the split `relabel` (none:
/// `None`) moved to the next class: what changes with them is what reads those labels.
fn evaluate_relabelled(config: &TrainConfig, model: &megagraph_models::GraphTransformer<Flex>, relabel: Option<SplitRole>) -> SplitAccuracy {
    let mut data = prepare(config).expect("prepare");
    let dataset = &mut data.dataset;
    let nodes = match relabel {
        Some(SplitRole::Train) => dataset.split.train.clone(),
        Some(SplitRole::Valid) => dataset.split.valid.clone(),
        Some(SplitRole::Test) => dataset.split.test.clone(),
        _ => Vec::new(),
    };
    for v in nodes {
        let label = &mut dataset.labels[v as usize];
        *label = (*label + 1) % dataset.num_classes as i64;
    }
    let batches = every_sequence(&data, config.training.batch_size);
    NodeClassificationTrainer::new(config, data).evaluate(model, &batches, &Default::default())
}

/// Every sequence of `data` in order, in batches of `batch_size` (what the trainer evaluates).
fn every_sequence(data: &megagraph_train::SequenceDataset, batch_size: usize) -> Vec<Vec<usize>> {
    (0..data.num_sequences())
        .collect::<Vec<_>>()
        .chunks(batch_size)
        .map(<[usize]>::to_vec)
        .collect()
}

#[test]
fn label_input_trains_and_its_predictions_read_the_training_labels_only() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    // long enough, and fast enough, for the label table to move predictions
    config.training.epochs = 12;
    config.optimizer.lr = Some(0.01);
    config.model.label_input = true;
    let device = Default::default();
    let outcome = NodeClassificationTrainer::new(&config, prepare(&config).expect("prepare"))
        .fit::<Autodiff<Flex>>(&device, &mut Quiet)
        .expect("train");
    let report = outcome.report;
    assert!(report.history.iter().all(|epoch| epoch.loss.is_finite()), "{:?}", report.history);
    let evaluate = |relabel| evaluate_relabelled(&config, &outcome.model, relabel);
    let on = evaluate(None);
    assert_eq!((on.valid, on.test), (report.best_valid_accuracy, report.test_accuracy));
    // other test (valid) labels move the test (valid) accuracy only: no prediction reads them
    let test_relabelled = evaluate(Some(SplitRole::Test));
    assert_eq!((test_relabelled.train, test_relabelled.valid), (on.train, on.valid));
    let valid_relabelled = evaluate(Some(SplitRole::Valid));
    assert_eq!((valid_relabelled.train, valid_relabelled.test), (on.train, on.test));
    // the predictions of the valid and test nodes read the training labels
    let train_relabelled = evaluate(Some(SplitRole::Train));
    assert_ne!((train_relabelled.valid, train_relabelled.test), (on.valid, on.test), "the shown labels changed no prediction");
}

#[test]
fn each_l2_penalty_shrinks_its_weights_and_adds_to_the_loss() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 3;
    // without the final norm, so that the classifier's scale is not the norm's to undo
    config.model.final_norm = false;
    let device = Default::default();
    type Outcome = megagraph_train::TrainOutcome<Flex>;
    let fit = |config: &TrainConfig| -> Outcome {
        NodeClassificationTrainer::new(config, prepare(config).expect("prepare"))
            .fit::<Autodiff<Flex>>(&device, &mut Quiet)
            .expect("train")
    };
    let sum = |t: burn::tensor::Tensor<Flex, 1>| -> f64 { t.into_data().iter::<f64>().sum() };
    let plain = fit(&config);
    let penalties: [(&str, fn(&mut TrainConfig), fn(&Outcome) -> burn::tensor::Tensor<Flex, 1>); 3] = [
        ("input_l2", |c| c.optimizer.input_l2 = 1.0, |o| o.model.input.weight_squared_norm()),
        ("layer_l2", |c| c.optimizer.layer_l2 = 1.0, |o| o.model.layer_weight_squared_norm()),
        ("classifier_l2", |c| c.optimizer.classifier_l2 = 1.0, |o| o.model.classifier_weight_squared_norm()),
    ];
    for (field, set, norm) in penalties {
        let mut penalized = config.clone();
        set(&mut penalized);
        let penalized = fit(&penalized);
        let (shrunk, unpenalized) = (sum(norm(&penalized)), sum(norm(&plain)));
        assert!(shrunk < 0.8 * unpenalized, "{field}: {shrunk} vs {unpenalized}");
        // the first step's loss includes λ/2 ‖W‖² of the initial weights, the same in both runs
        let first = |outcome: &Outcome| outcome.report.history[0].loss;
        assert!(first(&penalized) > first(&plain), "{field}: {} vs {}", first(&penalized), first(&plain));
    }
}

#[test]
fn a_snapshot_ensemble_averages_the_best_epochs_and_leaves_training_unchanged() {
    let _turn = crate::turn();
    let mut config = tiny_config();
    config.training.epochs = 8;
    let plain = without_times(run(&config));
    assert!(plain.ensemble.is_none());
    config.training.ensemble_epochs = 3;
    let ensembled = without_times(run(&config));
    // training and each epoch's evaluation are those of the run without it
    assert_eq!(ensembled.history, plain.history);
    assert_eq!(ensembled.best_epoch, plain.best_epoch);
    // its epochs: the three best validation accuracies, the earlier epoch on a tie
    let mut order: Vec<&megagraph_train::EpochMetrics> = plain.history.iter().collect();
    order.sort_by(|a, b| b.valid_accuracy.total_cmp(&a.valid_accuracy));
    let want: Vec<usize> = order[..3].iter().map(|m| m.epoch).collect();
    let ensemble = ensembled.ensemble.clone().expect("the report's ensemble");
    assert_eq!(ensemble.epochs, want);
    assert_eq!((ensembled.best_valid_accuracy, ensembled.test_accuracy), (ensemble.valid_accuracy, ensemble.test_accuracy));
    for accuracy in [ensemble.valid_accuracy, ensemble.test_accuracy] {
        assert!((0.0..=1.0).contains(&accuracy), "{ensemble:?}");
    }

    // an ensemble of one epoch scores as that epoch
    config.training.epochs = 1;
    let one = run(&config);
    let ensemble = one.ensemble.expect("the report's ensemble");
    let epoch = &one.history[0];
    assert_eq!(ensemble.epochs, vec![1]);
    assert_eq!((ensemble.valid_accuracy, ensemble.test_accuracy), (epoch.valid_accuracy, epoch.test_accuracy));
}

//! Self-training (`[training] self_training_rounds`): pseudo-labels in the batches, the rounds
//! and the round kept, and no test label read.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use megagraph_train::{NodeClassificationTrainer, Quiet, SequenceDataset, SplitRole, TrainConfig, TrainError, TrainReport, prepare};

use crate::fixtures::tiny_config;

/// The tiny synthetic graph with scarce labels (10% train, 20% valid, the rest test), trained
/// fast enough for confident predictions.
fn config() -> TrainConfig {
    let mut config = tiny_config();
    config.synthetic.train_fraction = 0.1;
    config.synthetic.valid_fraction = 0.2;
    config.training.epochs = 6;
    config.training.patience = 0;
    config.optimizer.lr = Some(0.01);
    config.optimizer.warmup_epochs = 1;
    config.training.self_training_rounds = 2;
    config.training.self_training_threshold = 0.6;
    config
}

fn nodes_of(data: &SequenceDataset, role: SplitRole) -> Vec<u32> {
    (0..data.dataset.num_nodes() as u32).filter(|&v| data.role(v) == role).collect()
}

#[test]
fn pseudo_labels_join_the_loss_targets_and_bad_ones_are_refused_naming_the_node() {
    let _turn = crate::turn();
    let config = config();
    let data = prepare(&config).expect("prepare");
    let n = data.dataset.num_nodes();
    let (train, valid, test) = (nodes_of(&data, SplitRole::Train), nodes_of(&data, SplitRole::Valid), nodes_of(&data, SplitRole::Test));
    assert!(!train.is_empty() && !valid.is_empty() && test.len() >= 2);
    let classes = data.dataset.num_classes as i64;
    // the first test node gets a class other than its own, the second none
    let (pseudo, plain) = (test[0], test[1]);
    let mut labels = vec![-1; n];
    labels[pseudo as usize] = (data.dataset.labels[pseudo as usize] + 1) % classes;
    data.set_pseudo_labels(Some(labels.clone())).expect("pseudo-labels");
    let indices: Vec<usize> = (0..data.num_sequences()).collect();
    let batch = data.batch::<Flex>(&indices, &Default::default());
    let targets: Vec<i64> = batch.labels.clone().into_data().iter::<i64>().collect();
    let weights: Vec<f32> = batch.train_weight.clone().into_data().iter::<f32>().collect();
    for (position, node) in batch.nodes.iter().enumerate() {
        let Some(node) = *node else { continue };
        let expected_weight = if node == pseudo || train.contains(&node) { 1.0 } else { 0.0 };
        assert_eq!(weights[position], expected_weight, "node {node}");
        if node == pseudo {
            assert_eq!(targets[position], labels[pseudo as usize], "the pseudo-label is the target");
        } else if train.contains(&node) || node == plain {
            assert_eq!(targets[position], data.dataset.labels[node as usize].max(0), "node {node}");
        }
    }
    assert_eq!(data.train_nodes(&batch.nodes), train.len() + 1);
    assert!(data.is_loss_node(pseudo) && !data.is_loss_node(plain) && data.is_loss_node(train[0]));
    // the labels themselves, and so every accuracy, are untouched
    assert_ne!(data.dataset.labels[pseudo as usize], labels[pseudo as usize]);
    data.set_pseudo_labels(None).expect("cleared");
    assert!(!data.is_loss_node(pseudo) && data.pseudo_labels().is_none());

    let refused = |labels: Vec<i64>, names: &str| {
        let err = data.set_pseudo_labels(Some(labels)).expect_err("refused");
        assert!(
            matches!(&err, TrainError::InvalidConfig { field: "pseudo_labels", reason } if reason.contains(names)),
            "{err}"
        );
        assert!(data.pseudo_labels().is_none(), "a refused set leaves none");
    };
    refused(vec![-1; n - 1], &format!("{} labels for {n} nodes", n - 1));
    for (node, label) in [(train[0], 0), (valid[0], 0), (test[0], classes), (test[0], -2)] {
        let mut labels = vec![-1; n];
        labels[node as usize] = label;
        refused(labels, &format!("node {node}"));
    }
}

/// Trains `config` on its data with the labels of the test nodes moved to the next class when
/// `move_test_labels`; returns the report and whether the data held pseudo-labels afterwards.
fn self_train(config: &TrainConfig, move_test_labels: bool) -> (TrainReport, bool) {
    let mut data = prepare(config).expect("prepare");
    if move_test_labels {
        let classes = data.dataset.num_classes as i64;
        for v in nodes_of(&data, SplitRole::Test) {
            let label = &mut data.dataset.labels[v as usize];
            *label = (*label + 1) % classes;
        }
    }
    let data = Arc::new(data);
    let outcome = NodeClassificationTrainer::new(config, Arc::clone(&data))
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .expect("train");
    (outcome.report, data.pseudo_labels().is_some())
}

#[test]
fn self_training_keeps_its_best_round_reads_no_test_label_and_leaves_the_data_as_given() {
    let _turn = crate::turn();
    let config = config();
    let (report, left) = self_train(&config, false);
    assert!(!left, "the data keeps no pseudo-labels");
    let rounds = &report.self_training;
    assert_eq!(rounds.iter().map(|r| r.round).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(rounds[0].pseudo_labels, 0);
    assert!(rounds[1..].iter().all(|r| r.pseudo_labels > 0), "{rounds:?}");
    // the round kept: the best validation accuracy, the earliest on a tie; the report is its own
    let kept: Vec<_> = rounds.iter().filter(|r| r.kept).collect();
    assert_eq!(kept.len(), 1, "{rounds:?}");
    let best = rounds.iter().map(|r| r.best_valid_accuracy).fold(f64::NEG_INFINITY, f64::max);
    let first_best = rounds.iter().position(|r| r.best_valid_accuracy == best);
    assert_eq!(Some(kept[0].round), first_best, "{rounds:?}");
    assert_eq!((report.best_valid_accuracy, report.test_accuracy), (kept[0].best_valid_accuracy, kept[0].test_accuracy));
    // round 0 is the run without self-training
    let mut plain = config.clone();
    plain.training.self_training_rounds = 0;
    let (alone, _) = self_train(&plain, false);
    assert!(alone.self_training.is_empty());
    assert_eq!((alone.best_valid_accuracy, alone.test_accuracy), (rounds[0].best_valid_accuracy, rounds[0].test_accuracy));
    // pseudo-labels change the training
    assert_ne!(
        rounds[1..].iter().map(|r| (r.best_valid_accuracy, r.test_accuracy)).collect::<Vec<_>>(),
        vec![(rounds[0].best_valid_accuracy, rounds[0].test_accuracy); 2],
        "the rounds trained as the first: {rounds:?}"
    );
    // moving every test label moves only the test accuracies: nothing else read them
    let (moved, _) = self_train(&config, true);
    let without_test = |report: &TrainReport| {
        report.self_training.iter().map(|r| (r.pseudo_labels, r.best_valid_accuracy, r.epochs_run, r.kept)).collect::<Vec<_>>()
    };
    assert_eq!(without_test(&moved), without_test(&report));
    let losses = |report: &TrainReport| report.history.iter().map(|m| m.loss).collect::<Vec<_>>();
    assert_eq!(losses(&moved), losses(&report));
    assert_ne!(moved.test_accuracy, report.test_accuracy);
}

//! TorchGT's attention modes in training: sparse, interleaved (which steps run full attention),
//! cluster reordering and block reformation, on a small synthetic graph.

use burn::backend::{Autodiff, Flex};
use megagraph_train::{
    AttentionMode, MeshConfig, NodeClassificationTrainer, Quiet, ReformRule, ReformSetting,
    TrainConfig, TrainError, TrainObserver, TrainReport, prepare,
};

fn tiny_config(mode: AttentionMode) -> TrainConfig {
    let mut config = TrainConfig::default();
    config.synthetic.nodes = 300;
    config.synthetic.classes = 3;
    config.synthetic.feature_dim = 16;
    // 5 sequences of at most 64 nodes, 2 per step: 3 steps per epoch
    config.data.seq_len = 64;
    config.training.epochs = 4;
    config.training.batch_size = 2;
    config.model.layers = Some(1);
    config.model.heads = Some(2);
    config.model.hidden = Some(16);
    config.model.ffn_hidden = Some(16);
    config.model.dropout = 0.0;
    config.model.input_dropout = 0.0;
    config.model.key_dropout = 0.0;
    config.optimizer.lr = 0.01;
    config.optimizer.warmup_epochs = 1;
    config.attention.mode = mode;
    config
}

/// Burn's random state is per backend and process: runs take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records the steps that ran full attention, per epoch.
#[derive(Default)]
struct FullSteps(Vec<Vec<usize>>);

impl TrainObserver for FullSteps {
    fn attention_steps(&mut self, _epoch: usize, full_steps: &[usize]) {
        self.0.push(full_steps.to_vec());
    }
}

fn run(config: &TrainConfig) -> (TrainReport, Vec<Vec<usize>>) {
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let data = prepare(config).expect("prepare");
    let mut observer = FullSteps::default();
    let outcome = NodeClassificationTrainer::new(config, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut observer)
        .unwrap_or_else(|e| panic!("{e}"));
    (outcome.report, observer.0)
}

fn losses(report: &TrainReport) -> Vec<f64> {
    report.history.iter().map(|m| m.loss).collect()
}

#[test]
fn every_mode_trains_and_sparse_attention_differs_from_full() {
    let (full, full_steps) = run(&tiny_config(AttentionMode::Full));
    let (sparse, sparse_steps) = run(&tiny_config(AttentionMode::Sparse));
    assert_eq!(full_steps, vec![vec![0, 1, 2]; 4]);
    assert_eq!(sparse_steps, vec![Vec::<usize>::new(); 4]);
    let mut reformed = tiny_config(AttentionMode::Sparse);
    reformed.attention.reorder = true;
    reformed.attention.clusters = 4;
    reformed.attention.block_reform = true;
    let (reformed_all, _) = run(&reformed);
    reformed.attention.reform_threshold = ReformSetting::Rule(ReformRule::Tuned);
    reformed.attention.mode = AttentionMode::Interleaved;
    reformed.attention.switch_freq = 1;
    let (reformed_tuned, tuned_steps) = run(&reformed);
    assert_eq!(tuned_steps, vec![vec![0]; 4]);
    for (name, report) in [
        ("full", &full),
        ("sparse", &sparse),
        ("reformed", &reformed_all),
        ("tuned", &reformed_tuned),
    ] {
        let losses = losses(report);
        assert_eq!(losses.len(), 4, "{name}");
        assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
        assert!(losses[3] < losses[0], "{name}: the loss falls: {losses:?}");
    }
    assert_ne!(
        losses(&full),
        losses(&sparse),
        "sparse attention is another computation"
    );
    assert_ne!(
        losses(&sparse),
        losses(&reformed_all),
        "reformation changes the edges"
    );
}

#[test]
fn interleaved_attention_switches_on_the_scheduled_steps() {
    let (full, _) = run(&tiny_config(AttentionMode::Full));
    let (sparse, _) = run(&tiny_config(AttentionMode::Sparse));
    let mut interleaved = tiny_config(AttentionMode::Interleaved);
    // F at least the steps of an epoch: every step full, the full run's losses
    interleaved.attention.switch_freq = 3;
    let (all_full, steps) = run(&interleaved);
    assert_eq!(steps, vec![vec![0, 1, 2]; 4]);
    assert_eq!(losses(&all_full), losses(&full));
    // F = 0: every step sparse, the sparse run's losses
    interleaved.attention.switch_freq = 0;
    let (all_sparse, steps) = run(&interleaved);
    assert_eq!(steps, vec![Vec::<usize>::new(); 4]);
    assert_eq!(losses(&all_sparse), losses(&sparse));
    // F = 2 of 3 steps: steps 0 and 1 full, step 2 sparse, in every epoch (the counter moves)
    interleaved.attention.switch_freq = 2;
    let (mixed, steps) = run(&interleaved);
    assert_eq!(steps, vec![vec![0, 1]; 4]);
    let mixed = losses(&mixed);
    assert!(
        mixed != losses(&full) && mixed != losses(&sparse),
        "{mixed:?}"
    );
}

#[test]
fn sparse_attention_on_a_mesh_is_a_typed_error() {
    let mut config = tiny_config(AttentionMode::Sparse);
    config.mesh = MeshConfig::new(1, 2, 1, 1);
    let data = prepare(&config).expect("prepare");
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let error = NodeClassificationTrainer::new(&config, data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .err();
    assert!(
        matches!(
            error,
            Some(TrainError::InvalidConfig {
                field: "attention.mode",
                ..
            })
        ),
        "{error:?}"
    );
}

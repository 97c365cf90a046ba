//! TorchGT's attention modes in training: sparse, interleaved (which steps run full attention),
//! cluster reordering and block reformation, on a small synthetic graph; sparse steps build no
//! distance rows, and a resumed run tunes reformation's `β` as an uninterrupted one.

use burn::backend::{Autodiff, Flex};
use megagraph_train::{
    AttentionMode, Checkpointer, MeshConfig, NodeClassificationTrainer, Quiet, ReformRule, ReformSetting,
    TrainConfig, TrainError, TrainObserver, TrainReport, prepare,
};

fn tiny_config(mode: AttentionMode) -> TrainConfig {
    let mut config = crate::fixtures::tiny_config();
    // 5 sequences of at most 64 nodes, 2 per step: 3 steps per epoch
    config.training.epochs = 4;
    config.training.batch_size = 2;
    config.optimizer.lr = Some(0.01);
    config.optimizer.warmup_epochs = 1;
    config.attention.mode = mode;
    config
}

/// Records the steps that ran full attention, per epoch.
#[derive(Default)]
struct FullSteps(Vec<Vec<usize>>);

impl TrainObserver for FullSteps {
    fn attention_steps(&mut self, _epoch: usize, full_steps: &[usize]) {
        self.0.push(full_steps.to_vec());
    }
}

fn run(config: &TrainConfig) -> (TrainReport, Vec<Vec<usize>>) {
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
    let _turn = crate::turn();
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
    let _turn = crate::turn();
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
fn sparse_and_interleaved_attention_train_with_the_graph_token() {
    let _turn = crate::turn();
    let (sparse, _) = run(&tiny_config(AttentionMode::Sparse));
    let mut token = tiny_config(AttentionMode::Sparse);
    token.model.graph_token = true;
    let (sparse_token, steps) = run(&token);
    assert_eq!(steps, vec![Vec::<usize>::new(); 4]);
    token.attention.mode = AttentionMode::Interleaved;
    token.attention.switch_freq = 1;
    let (interleaved_token, steps) = run(&token);
    assert_eq!(steps, vec![vec![0]; 4]);
    for (name, report) in [("sparse", &sparse_token), ("interleaved", &interleaved_token)] {
        let losses = losses(report);
        assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
        assert!(losses[3] < losses[0], "{name} with the token: the loss falls: {losses:?}");
    }
    assert_ne!(losses(&sparse_token), losses(&sparse), "the token joins the sparse steps");
    assert_ne!(losses(&interleaved_token), losses(&sparse_token), "interleaved runs full steps");
    // a mesh still refuses the token, whatever the attention
    token.mesh = MeshConfig::new(1, 2, 1, 1);
    assert!(
        matches!(token.validate(), Err(TrainError::InvalidConfig { field: "model.graph_token", .. })),
        "{:?}",
        token.validate()
    );
}

#[test]
fn sparse_attention_on_a_mesh_is_a_typed_error() {
    let _turn = crate::turn();
    let mut config = tiny_config(AttentionMode::Sparse);
    config.mesh = MeshConfig::new(1, 2, 1, 1);
    let data = prepare(&config).expect("prepare");
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

/// The distance rows a run of `config` builds (training and evaluation), and its report.
fn rows_built(config: &TrainConfig) -> (u64, TrainReport) {
    let data = std::sync::Arc::new(prepare(config).expect("prepare"));
    let before = data.index_rows_built();
    let outcome = NodeClassificationTrainer::new(config, data.clone())
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|e| panic!("{e}"));
    (data.index_rows_built() - before, outcome.report)
}

#[test]
fn sparse_steps_build_no_distance_rows() {
    let _turn = crate::turn();
    for prefetch in [None, Some(2)] {
        let mut sparse = tiny_config(AttentionMode::Sparse);
        sparse.data.prefetch_batches = prefetch;
        let (rows, report) = rows_built(&sparse);
        assert_eq!(rows, 0, "prefetch {prefetch:?}");
        assert_eq!(report.epochs_run, 4);
        // interleaved with F = 1 of 3 steps, evaluated with sparse attention: only step 0 of
        // each epoch (its 2 sequences, in the loop's seeded order) builds rows
        let mut interleaved = tiny_config(AttentionMode::Interleaved);
        interleaved.data.prefetch_batches = prefetch;
        interleaved.attention.switch_freq = 1;
        let (rows, _) = rows_built(&interleaved);
        let data = prepare(&interleaved).expect("prepare");
        let full_step_rows = |epoch: u64| {
            use rand::SeedableRng;
            use rand::seq::SliceRandom;
            let mut order: Vec<usize> = (0..data.num_sequences()).collect();
            let seed = interleaved.training.seed;
            order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ epoch.rotate_left(32)));
            order[..2].iter().map(|&s| data.sequences[s].len() as u64).sum::<u64>()
        };
        let expected: u64 = (1..=4).map(full_step_rows).sum();
        assert_eq!(rows, expected, "interleaved: the rows of its full steps only (prefetch {prefetch:?})");
        let (rows, _) = rows_built(&tiny_config(AttentionMode::Full));
        assert!(rows > 0);
    }
}

#[test]
fn sparse_attention_ignores_the_distance_rows() {
    let _turn = crate::turn();
    use burn::module::AutodiffModule;
    use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
    use burn::tensor::backend::Backend;
    use megagraph_models::{SparseAttention, masked_cross_entropy};
    type B = Autodiff<Flex>;
    let mut config = tiny_config(AttentionMode::Sparse);
    config.attention.reorder = true;
    config.attention.block_reform = true;
    let data = prepare(&config).expect("prepare");
    let d = &data.dataset;
    let device = Default::default();
    B::seed(&device, 3);
    let model = config
        .model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes)
        .init::<B>(&device);
    let indices = [0, 2];
    let reform = config.attention.reform(1.0, 0);
    let sparse = SparseAttention::new(data.batch_edges::<B>(&indices, reform.as_ref(), false, &device).expect("edges"));
    // one AdamW step from a batch with distance rows and from one without: the same parameters
    let step = |batch: megagraph_train::NodeBatch<B>| {
        let train = data.train_nodes(&batch.nodes);
        let logits = model.forward_with(batch.graph, &sparse).expect("sparse forward");
        let values: Vec<f32> = logits.clone().into_data().iter::<f32>().collect();
        let loss = masked_cross_entropy(logits, batch.labels, batch.train_weight, train);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let stepped = AdamWConfig::new().init().step(0.01, model.clone(), grads);
        let mut params = Vec::new();
        struct Collect<'a>(&'a mut Vec<f32>);
        impl<Bk: Backend> burn::module::ModuleVisitor<Bk> for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<Bk, D>>) {
                self.0.extend(param.val().into_data().iter::<f32>());
            }
        }
        burn::module::Module::visit(&stepped.valid(), &mut Collect(&mut params));
        (values, params)
    };
    let with_rows = step(data.batch(&indices, &device));
    let rows_before = data.index_rows_built();
    let without_rows = step(data.batch_without_distances(&indices, &device));
    assert_eq!(data.index_rows_built(), rows_before, "no rows built");
    assert_eq!(with_rows.0, without_rows.0, "logits");
    assert_eq!(with_rows.1, without_rows.1, "parameters after a step");
}

/// Sparse attention reformed under the tuned `β` over `epochs` epochs.
fn tuned_config(epochs: usize) -> TrainConfig {
    let mut config = tiny_config(AttentionMode::Sparse);
    config.training.epochs = epochs;
    config.attention.reorder = true;
    config.attention.clusters = 4;
    config.attention.block_reform = true;
    config.attention.reform_threshold = ReformSetting::Rule(ReformRule::Tuned);
    config
}

/// Records the `β` chosen after each epoch, and interrupts training after `stop_after`
/// epochs (like a killed process) when given.
struct Betas {
    chosen: Vec<(usize, f64)>,
    stop_after: Option<usize>,
}

impl TrainObserver for Betas {
    fn reform_beta(&mut self, epoch: usize, beta: f64) {
        self.chosen.push((epoch, beta));
    }

    fn should_stop(&mut self, epoch: usize) -> bool {
        self.stop_after.is_some_and(|last| epoch >= last)
    }
}

/// Trains `config` (interrupted after `stop_after` epochs when given) with epoch `e` taking
/// `10^-e` seconds on `β`'s clock: steps ever faster, so the loss-decrease rate rises and `β`
/// steps up from epoch 9 on. The report (`None` when interrupted) and the `β`s chosen.
fn run_tuned(config: &TrainConfig, stop_after: Option<usize>) -> (Option<TrainReport>, Vec<(usize, f64)>) {
    let data = prepare(config).expect("prepare");
    let mut betas = Betas {
        chosen: Vec::new(),
        stop_after,
    };
    let outcome = NodeClassificationTrainer::new(config, data)
        .with_beta_clock(|epoch, _| 0.1f64.powi(epoch as i32))
        .fit::<Autodiff<Flex>>(&Default::default(), &mut betas);
    match outcome {
        Ok(outcome) => (Some(outcome.report), betas.chosen),
        Err(TrainError::Interrupted { epoch }) if Some(epoch) == stop_after => (None, betas.chosen),
        Err(error) => panic!("{error}"),
    }
}

/// What a run computed, epoch by epoch (not how long it took), and its final test accuracy.
fn metrics(report: &TrainReport) -> (Vec<[f64; 5]>, usize, f64) {
    let history = report
        .history
        .iter()
        .map(|m| [m.loss, m.train_accuracy, m.valid_accuracy, m.test_accuracy, m.learning_rate])
        .collect();
    (history, report.best_epoch, report.test_accuracy)
}

#[test]
fn a_resumed_run_tunes_beta_as_an_uninterrupted_one() {
    let _turn = crate::turn();
    let epochs = 16;
    let (straight, straight_betas) = run_tuned(&tuned_config(epochs), None);
    let straight = straight.expect("not interrupted");
    let betas: Vec<f64> = straight_betas.iter().map(|&(_, beta)| beta).collect();
    assert_eq!(straight_betas.len(), epochs);
    // β holds until epoch 9, then moves (so a tuner restarted on resume would show)
    assert!(betas[..8].iter().all(|&beta| beta == 1.0), "{betas:?}");
    assert!(betas[8..].iter().any(|&beta| beta != 1.0), "β never moved: {betas:?}");

    let dir = tempfile::tempdir().expect("temporary directory");
    let mut first = tuned_config(epochs);
    first.training.checkpoint_dir = Some(dir.path().to_path_buf());
    let (_, first_betas) = run_tuned(&first, Some(epochs / 2));
    let saved = Checkpointer::new(dir.path())
        .latest_state()
        .expect("readable")
        .expect("a checkpoint");
    assert_eq!(saved.beta_tuner.beta(), betas[epochs / 2 - 1]);
    let mut second = first.clone();
    second.training.resume = true;
    let (resumed, resumed_betas) = run_tuned(&second, None);
    let resumed = resumed.expect("not interrupted");

    let joined: Vec<(usize, f64)> = first_betas.into_iter().chain(resumed_betas).collect();
    assert_eq!(joined, straight_betas, "β history");
    assert_eq!(metrics(&resumed), metrics(&straight));
}

#[test]
fn a_checkpoint_without_the_tuner_resumes_with_a_fresh_one() {
    let _turn = crate::turn();
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut first = tuned_config(3);
    first.training.checkpoint_dir = Some(dir.path().to_path_buf());
    run_tuned(&first, Some(2));
    // an older checkpoint: its state.json has no `beta_tuner`
    let checkpoint = Checkpointer::new(dir.path())
        .latest_dir()
        .expect("readable")
        .expect("a checkpoint");
    let path = checkpoint.join("state.json");
    let text = std::fs::read_to_string(&path).expect("state.json");
    let mut state: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let removed = state.as_object_mut().and_then(|fields| fields.remove("beta_tuner"));
    assert!(removed.is_some(), "the checkpoint saves the tuner");
    std::fs::write(&path, state.to_string()).expect("written");
    let mut second = first.clone();
    second.training.resume = true;
    let (report, betas) = run_tuned(&second, None);
    assert_eq!(report.map(|report| report.history.len()), Some(3));
    assert_eq!(betas, vec![(3, 1.0)]);
}

//! `MegaGraphTrainer` inside Burn's `SupervisedTraining`, on a small synthetic (CSBM) graph:
//! it learns with Burn's metrics, stops early, resumes from Burn's checkpoints exactly, and
//! equals Burn's own single-device strategy step for step.

use std::path::Path;
use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::module::{AutodiffModule, Module};
use burn::optim::AdamWConfig;
use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::Backend;
use megagraph_models::GraphTransformer;
use megagraph_train::burn_train::metric::store::{Aggregate, Direction, Split};
use megagraph_train::burn_train::metric::{AccuracyMetric, LossMetric};
use megagraph_train::burn_train::{
    ExecutionStrategy, Learner, MetricEarlyStoppingStrategy, StoppingCondition, SupervisedTraining, TrainingStrategy,
};
use megagraph_train::{
    MegaGraphTrainer, NodeClassificationTrainer, NodeClassifier, NodeLearningComponents, SequenceBatch, SequenceBatcher, SequenceDataset,
    SplitRole, SplitSequences, TrainConfig, prepare,
};

type B = Autodiff<Flex>;
type Inner = Flex;

struct Setup {
    config: TrainConfig,
    data: Arc<SequenceDataset>,
}

impl Setup {
    fn new(config: TrainConfig) -> Self {
        let data = Arc::new(prepare(&config).expect("prepare"));
        Self { config, data }
    }

    fn loader<Bk: Backend>(&self, role: SplitRole, shuffle: Option<u64>) -> Arc<dyn DataLoader<Bk, SequenceBatch<Bk>>> {
        let builder = DataLoaderBuilder::new(SequenceBatcher::new(self.data.clone(), role)).batch_size(2);
        let builder = match shuffle {
            Some(seed) => builder.shuffle(seed),
            None => builder,
        };
        builder.build(SplitSequences::new(self.data.clone(), role))
    }

    fn model(&self, seed: u64) -> NodeClassifier<B> {
        let device = Default::default();
        B::seed(&device, seed);
        let d = &self.data.dataset;
        let config = self
            .config
            .model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes);
        NodeClassifier::init(&config, &device).with_label_smoothing(self.config.training.label_smoothing)
    }

    fn training(&self, dir: &Path, shuffle: Option<u64>) -> SupervisedTraining<Components> {
        SupervisedTraining::new(dir, self.loader(SplitRole::Train, shuffle), self.loader(SplitRole::Valid, None))
            .metrics((LossMetric::new(), AccuracyMetric::new()))
            .with_application_logger(None)
    }

    /// Accuracy of `model` on the test nodes.
    fn test_accuracy(&self, model: &GraphTransformer<Inner>) -> f64 {
        let batches: Vec<Vec<usize>> = (0..self.data.num_sequences()).map(|i| vec![i]).collect();
        NodeClassificationTrainer::new(&self.config, self.data.clone())
            .evaluate(model, &batches, &Default::default())
            .test
    }
}

type Scheduler = burn::optim::lr_scheduler::cosine::CosineAnnealingLrScheduler;
type Components = NodeLearningComponents<B, Scheduler>;

/// The optimizer of every run here: the learner's and, on a mesh, every rank's.
fn optimizer() -> AdamWConfig {
    AdamWConfig::new().with_weight_decay(1e-3)
}

/// The strategy on one device.
fn single_device() -> MegaGraphTrainer<B> {
    MegaGraphTrainer::<B>::single_device(Default::default()).with_optimizer(optimizer())
}

/// A learner of `trainer` (holding its optimizer) under a cosine schedule from `lr`.
fn learner(setup: &Setup, trainer: &MegaGraphTrainer<B>, lr: f64, epochs_of_steps: usize) -> Learner<Components> {
    let steps = epochs_of_steps * SplitSequences::new(setup.data.clone(), SplitRole::Train).indices().len().div_ceil(2);
    let scheduler = CosineAnnealingLrSchedulerConfig::new(lr, steps.max(1))
        .with_min_lr(lr * 0.1)
        .init()
        .expect("scheduler");
    trainer.learner(setup.model(7), scheduler)
}

/// Mean of a metric over an epoch, from the files of Burn's `FileMetricLogger`.
fn logged_mean(dir: &Path, split: &str, epoch: usize, metric: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(split).join(format!("epoch-{epoch}")).join(format!("{metric}.log"))).ok()?;
    let (mut sum, mut count) = (0.0, 0.0);
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.split(',');
        let value: f64 = parts.next()?.parse().ok()?;
        let n: f64 = parts.next().map_or(Some(1.0), |c| c.parse().ok())?;
        sum += value * n;
        count += n;
    }
    (count > 0.0).then(|| sum / count)
}

fn epochs_logged(dir: &Path) -> usize {
    (1..).take_while(|epoch| dir.join("train").join(format!("epoch-{epoch}")).is_dir()).count()
}

fn parameters(model: &GraphTransformer<Inner>) -> Vec<f32> {
    let record = model.clone();
    let mut values = Vec::new();
    struct Collect<'a>(&'a mut Vec<f32>);
    impl<Bk: Backend> burn::module::ModuleVisitor<Bk> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<Bk, D>>) {
            self.0.extend(param.val().into_data().iter::<f32>());
        }
    }
    record.visit(&mut Collect(&mut values));
    values
}

#[test]
fn learns_the_synthetic_graph_with_burn_metrics() {
    let _turn = crate::turn();
    let mut config = crate::fixtures::tiny_config();
    config.model.dropout = 0.1;
    let setup = Setup::new(config);
    let dir = tempfile::tempdir().unwrap();
    let epochs = 15;
    let result = setup
        .training(dir.path(), Some(3))
        .num_epochs(epochs)
        .with_training_strategy(single_device().into_strategy())
        .launch(learner(&setup, &single_device(), 0.01, epochs));
    assert_eq!(epochs_logged(dir.path()), epochs);
    let first = logged_mean(dir.path(), "train", 1, "Loss").expect("train loss of epoch 1");
    let last = logged_mean(dir.path(), "train", epochs, "Loss").expect("train loss of the last epoch");
    assert!(last < 0.7 * first, "train loss {first} -> {last}");
    let valid = logged_mean(dir.path(), "valid", epochs, "Accuracy").expect("valid accuracy");
    assert!(valid > 60.0, "valid accuracy {valid}% (chance 33%)");
    let test = setup.test_accuracy(&result.model.model);
    assert!(test > 0.6, "test accuracy {test} (chance 0.33)");
}

#[test]
fn early_stopping_ends_a_run_that_stopped_improving() {
    let _turn = crate::turn();
    let setup = Setup::new(crate::fixtures::tiny_config());
    let dir = tempfile::tempdir().unwrap();
    // A learning rate of 1e-30 leaves every f32 parameter (and so the validation loss) unchanged.
    let stop = MetricEarlyStoppingStrategy::new(
        &LossMetric::<B>::new(),
        Aggregate::Mean,
        Direction::Lowest,
        Split::Valid,
        StoppingCondition::NoImprovementSince { n_epochs: 2 },
    );
    setup
        .training(dir.path(), None)
        .num_epochs(10)
        .early_stopping(stop)
        .with_training_strategy(single_device().into_strategy())
        .launch(learner(&setup, &single_device(), 1e-30, 10));
    assert_eq!(epochs_logged(dir.path()), 3, "best epoch 1, no improvement in 2 and 3");
}

#[test]
fn a_run_resumed_from_burn_checkpoints_equals_an_uninterrupted_one() {
    let _turn = crate::turn();
    let setup = Setup::new(crate::fixtures::tiny_config());
    let strategy = || single_device().into_strategy();
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();

    let whole = tempfile::tempdir().unwrap();
    let full = setup
        .training(whole.path(), None)
        .num_epochs(4)
        .with_training_strategy(strategy())
        .launch(learner(&setup, &single_device(), 0.01, 4));

    let split = tempfile::tempdir().unwrap();
    setup
        .training(split.path(), None)
        .num_epochs(2)
        .with_file_checkpointer(recorder.clone())
        .with_training_strategy(strategy())
        .launch(learner(&setup, &single_device(), 0.01, 4));
    assert!(split.path().join("checkpoint").join("model-2.mpk").is_file());
    let resumed = setup
        .training(split.path(), None)
        .num_epochs(4)
        .checkpoint(2)
        .with_file_checkpointer(recorder)
        .with_training_strategy(strategy())
        .launch(learner(&setup, &single_device(), 0.01, 4));

    assert_eq!(parameters(&resumed.model.model), parameters(&full.model.model));
}

#[test]
fn single_device_equals_burns_default_strategy() {
    let _turn = crate::turn();
    let setup = Setup::new(crate::fixtures::tiny_config());
    let ours_dir = tempfile::tempdir().unwrap();
    let ours = setup
        .training(ours_dir.path(), Some(5))
        .num_epochs(3)
        .with_training_strategy(single_device().into_strategy())
        .launch(learner(&setup, &single_device(), 0.01, 3));
    let burn_dir = tempfile::tempdir().unwrap();
    let burns = setup
        .training(burn_dir.path(), Some(5))
        .num_epochs(3)
        .with_training_strategy(TrainingStrategy::Default(ExecutionStrategy::SingleDevice(Default::default())))
        .launch(learner(&setup, &single_device(), 0.01, 3));
    let (a, b) = (parameters(&ours.model.model), parameters(&burns.model.model));
    assert_eq!(a.len(), b.len());
    assert_eq!(a, b);
    for epoch in 1..=3 {
        assert_eq!(
            logged_mean(ours_dir.path(), "valid", epoch, "Loss"),
            logged_mean(burn_dir.path(), "valid", epoch, "Loss")
        );
    }
}

/// Norm-wise relative difference `|a - b| / |b|` of two parameter vectors (same module order).
fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
    diff / norm
}

/// The tiny model with 2 layers over sequences of 50 nodes: 6 training sequences, so that
/// steps of 2 fit a 2-rank mesh.
fn mesh_setup() -> Setup {
    let mut config = crate::fixtures::tiny_config();
    config.model.layers = Some(2);
    config.data.seq_len = 50;
    Setup::new(config)
}

#[test]
fn a_parallel_mesh_trains_like_one_device() {
    let _turn = crate::turn();
    use megagraph_parallel::ParallelConfig;
    let setup = mesh_setup();
    // 6 training sequences in steps of 2: every step fits dp x micro_batches = 2.
    assert_eq!(SplitSequences::new(setup.data.clone(), SplitRole::Train).indices().len(), 6);
    let epochs = 2;

    let single_dir = tempfile::tempdir().unwrap();
    let single = setup
        .training(single_dir.path(), None)
        .num_epochs(epochs)
        .with_training_strategy(single_device().into_strategy())
        .launch(learner(&setup, &single_device(), 0.01, epochs));
    let expected = parameters(&single.model.model);
    let initial = parameters(&learner(&setup, &single_device(), 0.01, epochs).model().model.valid());

    for mesh in [
        ParallelConfig::uniform(2, 2, 1, 1, 2).unwrap(),
        ParallelConfig::uniform(1, 1, 2, 1, 2).unwrap(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let trainer = MegaGraphTrainer::<B>::parallel(mesh.clone(), vec![Default::default()]).with_optimizer(optimizer());
        let d = &setup.data.dataset;
        let model_config = setup
            .config
            .model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes);
        trainer.check(&model_config, &setup.data, 2).expect("the mesh fits");
        let learner = learner(&setup, &trainer, 0.01, epochs);
        let parallel = setup
            .training(dir.path(), None)
            .num_epochs(epochs)
            .with_training_strategy(trainer.into_strategy())
            .launch(learner);
        let found = parameters(&parallel.model.model);
        let moved = relative_difference(&expected, &initial);
        let difference = relative_difference(&found, &expected);
        assert!(moved > 1e-3, "training moved the parameters ({moved:e})");
        println!("{mesh:?}: parameters differ from one device by {difference:e} (moved {moved:e})");
        assert!(difference <= 1e-4, "{mesh:?}: parameters differ from one device by {difference:e} (moved {moved:e})");
        for epoch in 1..=epochs {
            let (a, b) = (
                logged_mean(dir.path(), "valid", epoch, "Loss").expect("valid loss"),
                logged_mean(single_dir.path(), "valid", epoch, "Loss").expect("valid loss"),
            );
            assert!((a - b).abs() <= 1e-4 * b.abs(), "{mesh:?} epoch {epoch}: valid loss {a} vs {b}");
            let train = logged_mean(dir.path(), "train", epoch, "Loss").expect("train loss from the mesh");
            let reference = logged_mean(single_dir.path(), "train", epoch, "Loss").expect("train loss");
            assert!((train - reference).abs() <= 1e-4 * reference.abs(), "{mesh:?} epoch {epoch}: train loss {train} vs {reference}");
        }
    }
}

#[test]
fn a_mesh_run_resumed_with_its_optimizer_state_equals_an_uninterrupted_one() {
    let _turn = crate::turn();
    use megagraph_parallel::ParallelConfig;
    let setup = mesh_setup();
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let mesh = ParallelConfig::uniform(1, 1, 2, 1, 2).unwrap();
    let trainer = |optimizer_dir: Option<&Path>| {
        let trainer = MegaGraphTrainer::<B>::parallel(mesh.clone(), vec![Default::default()]).with_optimizer(optimizer());
        match optimizer_dir {
            Some(dir) => trainer.with_optimizer_checkpoints(dir),
            None => trainer,
        }
        .into_strategy()
    };

    let whole = tempfile::tempdir().unwrap();
    let full = setup
        .training(whole.path(), None)
        .num_epochs(4)
        .with_training_strategy(trainer(None))
        .launch(learner(&setup, &single_device(), 0.01, 4));
    let expected = parameters(&full.model.model);

    // 2 epochs with Burn's checkpoints and the mesh's optimizer state, then resumed to 4
    let split = tempfile::tempdir().unwrap();
    let states = split.path().join("mesh");
    setup
        .training(split.path(), None)
        .num_epochs(2)
        .with_file_checkpointer(recorder.clone())
        .with_training_strategy(trainer(Some(&states)))
        .launch(learner(&setup, &single_device(), 0.01, 4));
    for epoch in [1, 2] {
        assert!(states.join(format!("mesh-optimizer-{epoch}.mpk")).is_file(), "epoch {epoch}");
    }
    let resume = |optimizer_dir: Option<&Path>| {
        let resumed = setup
            .training(split.path(), None)
            .num_epochs(4)
            .checkpoint(2)
            .with_file_checkpointer(recorder.clone())
            .with_training_strategy(trainer(optimizer_dir))
            .launch(learner(&setup, &single_device(), 0.01, 4));
        relative_difference(&parameters(&resumed.model.model), &expected)
    };
    // without the moments (each resume writes checkpoints 3 and 4: the state of 2 stays)
    let restarted = resume(None);
    let continued = resume(Some(&states));
    println!("resumed: with the mesh's optimizer state {continued:e}, without {restarted:e}");
    assert!(continued <= 1e-6, "resumed with the optimizer state: {continued:e} from the uninterrupted run");
    assert!(restarted > 100.0 * continued.max(1e-9), "restarting the moments changes nothing ({restarted:e})");
    // the last two states are kept
    assert!(!states.join("mesh-optimizer-2.mpk").is_file() && states.join("mesh-optimizer-4.mpk").is_file());
}

/// The sparse run of `config` through `trainer` with batches of every training sequence (one
/// step per epoch, as the command line's loop takes them): the logged train loss and valid
/// accuracy (a fraction) of each epoch, and the distance rows the run built.
fn learner_history(setup: &Setup, trainer: MegaGraphTrainer<B>, epochs: usize) -> (Vec<f64>, Vec<f64>, u64) {
    let config = &setup.config;
    let batch = setup.data.num_sequences();
    let train = DataLoaderBuilder::new(SequenceBatcher::new(setup.data.clone(), SplitRole::Train))
        .batch_size(batch)
        .build(SplitSequences::new(setup.data.clone(), SplitRole::Train));
    let valid = DataLoaderBuilder::new(SequenceBatcher::new(setup.data.clone(), SplitRole::Valid))
        .batch_size(batch)
        .build(SplitSequences::new(setup.data.clone(), SplitRole::Valid));
    let dir = tempfile::tempdir().unwrap();
    let learner = trainer.learner(setup.model(config.training.seed), config.schedule(1).scheduler());
    let rows_before = setup.data.index_rows_built();
    SupervisedTraining::new(dir.path(), train, valid)
        .metrics((LossMetric::new(), AccuracyMetric::new()))
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(trainer.into_strategy())
        .launch(learner);
    let rows = setup.data.index_rows_built() - rows_before;
    let logged = |split, metric, scale: f64| -> Vec<f64> {
        (1..=epochs)
            .map(|epoch| logged_mean(dir.path(), split, epoch, metric).expect("logged") * scale)
            .collect()
    };
    (logged("train", "Loss", 1.0), logged("valid", "Accuracy", 0.01), rows)
}

/// Sparse attention (with Graphormer's graph token when `graph_token`) trained through the
/// learner and through the command line's loop: the same losses and validation accuracies, and
/// no distance rows built. Returns the setup's attention section.
fn learner_equals_the_command_line_loop(graph_token: bool) -> megagraph_train::AttentionConfig {
    use megagraph_train::{AttentionMode, Quiet};
    let epochs = 3;
    let mut config = crate::fixtures::tiny_config();
    config.attention.mode = AttentionMode::Sparse;
    config.model.graph_token = graph_token;
    config.training.epochs = epochs;
    config.training.batch_size = 16;
    config.optimizer.lr = Some(0.01);
    let setup = Setup::new(config);
    let config = &setup.config;
    // every sequence holds training nodes: one step of all of them per epoch on both paths
    assert_eq!(SplitSequences::new(setup.data.clone(), SplitRole::Train).indices().len(), setup.data.num_sequences());
    assert!(setup.data.num_sequences() <= config.training.batch_size);

    let cli = NodeClassificationTrainer::new(config, setup.data.clone())
        .fit::<B>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|e| panic!("{e}"))
        .report;
    let cli_loss: Vec<f64> = cli.history.iter().map(|m| m.loss).collect();
    let cli_valid: Vec<f64> = cli.history.iter().map(|m| m.valid_accuracy).collect();

    let trainer = || {
        MegaGraphTrainer::<B>::single_device(Default::default())
            .with_optimizer(AdamWConfig::new().with_weight_decay(config.optimizer.weight_decay as f32))
    };
    let sparse = trainer()
        .with_attention(config.attention.clone(), config.training.seed)
        .unwrap_or_else(|e| panic!("{e}"));
    let (loss, valid, rows) = learner_history(&setup, sparse, epochs);
    let (full_loss, _, full_rows) = learner_history(&setup, trainer(), epochs);
    println!("command line {cli_loss:?} {cli_valid:?}; learner sparse {loss:?} {valid:?}, full {full_loss:?}");
    for epoch in 0..epochs {
        let (a, b) = (loss[epoch], cli_loss[epoch]);
        assert!((a - b).abs() <= 1e-5 * b.abs(), "epoch {}: learner loss {a} vs the command line's {b}", epoch + 1);
        assert!((valid[epoch] - cli_valid[epoch]).abs() < 1e-9, "epoch {}: valid accuracy {valid:?} vs {cli_valid:?}", epoch + 1);
    }
    assert_ne!(loss, full_loss, "the learner ran sparse attention");
    assert_eq!(rows, 0, "sparse steps and their validation build no distance rows");
    assert!(full_rows > 0);
    config.attention.clone()
}

#[test]
fn sparse_attention_through_the_learner_equals_the_command_line_loop() {
    let _turn = crate::turn();
    use megagraph_train::TrainError;
    let attention = learner_equals_the_command_line_loop(false);
    // a model with the graph token: both paths join it to every node in their sparse steps
    learner_equals_the_command_line_loop(true);
    let trainer = || MegaGraphTrainer::<B>::single_device(Default::default());

    // a mesh runs full attention only, and β's tuner lives in the command line's loop: refused
    let mesh = megagraph_parallel::ParallelConfig::uniform(1, 1, 2, 1, 1).unwrap();
    let refused = MegaGraphTrainer::<B>::parallel(mesh, vec![Default::default()])
        .with_attention(attention.clone(), 0)
        .err();
    assert!(matches!(refused, Some(TrainError::InvalidConfig { field: "attention.mode", .. })), "{refused:?}");
    let mut tuned = attention;
    tuned.reorder = true;
    tuned.block_reform = true;
    tuned.reform_threshold = megagraph_train::ReformSetting::Rule(megagraph_train::ReformRule::Tuned);
    let refused = trainer().with_attention(tuned, 0).err();
    assert!(matches!(refused, Some(TrainError::InvalidConfig { field: "attention.reform_threshold", .. })), "{refused:?}");
}

/// The command line's loop (on one device, or on a `dp = 2` mesh when `mesh`): its training
/// loss per epoch.
fn command_line_losses(config: &TrainConfig, mesh: bool) -> Vec<f64> {
    let mut config = config.clone();
    if mesh {
        config.mesh = megagraph_train::MeshConfig::new(1, 1, 2, 1);
    }
    let data = Arc::new(prepare(&config).expect("prepare"));
    let report = NodeClassificationTrainer::new(&config, data)
        .fit::<B>(&Default::default(), &mut megagraph_train::Quiet)
        .unwrap_or_else(|e| panic!("{e}"))
        .report;
    report.history.iter().map(|m| m.loss).collect()
}

#[test]
fn label_smoothing_reaches_the_learner_the_command_line_loop_and_the_mesh() {
    let _turn = crate::turn();
    let epochs = 2;
    let mut config = crate::fixtures::tiny_config();
    config.training.epochs = epochs;
    config.training.batch_size = 16;
    config.optimizer.lr = Some(0.01);
    config.training.label_smoothing = 0.2;
    // 6 sequences: one step of all of them per epoch, which dp = 2 divides
    config.data.seq_len = 50;
    let setup = Setup::new(config);
    assert_eq!(setup.data.num_sequences(), 6);
    let config = &setup.config;
    let cli = command_line_losses(config, false);
    let trainer = MegaGraphTrainer::<B>::single_device(Default::default())
        .with_optimizer(AdamWConfig::new().with_weight_decay(config.optimizer.weight_decay as f32));
    let (learner, _, _) = learner_history(&setup, trainer, epochs);
    let mesh = command_line_losses(config, true);
    let mut unsmoothed = config.clone();
    unsmoothed.training.label_smoothing = 0.0;
    let plain = command_line_losses(&unsmoothed, false);
    println!("smoothed: command line {cli:?}, learner {learner:?}, mesh {mesh:?}; plain {plain:?}");
    for epoch in 0..epochs {
        let b = cli[epoch];
        assert!((learner[epoch] - b).abs() <= 1e-5 * b.abs(), "epoch {}: learner {learner:?} vs {cli:?}", epoch + 1);
        assert!((mesh[epoch] - b).abs() <= 1e-4 * b.abs(), "epoch {}: mesh {mesh:?} vs {cli:?}", epoch + 1);
    }
    // the same first step without smoothing has another loss: the checks above can fail
    assert!((plain[0] - cli[0]).abs() > 1e-3, "smoothing changed nothing: {plain:?} vs {cli:?}");
}

/// Reformation reads the clusters of the sequences' reordering: `check` refuses a dataset
/// prepared without them, naming `attention.block_reform` as the command line's loop does,
/// where `fit` would panic at the first batch; on a reordered dataset it passes and the learner
/// trains with reformed sparse steps.
#[test]
fn check_refuses_reformation_on_sequences_not_reordered() {
    let _turn = crate::turn();
    use megagraph_train::{AttentionMode, TrainError};
    let mut config = crate::fixtures::tiny_config();
    config.attention.mode = AttentionMode::Sparse;
    let unordered = Setup::new(config.clone());
    config.attention.reorder = true;
    config.attention.clusters = 4;
    config.attention.block_reform = true;
    let trainer = single_device()
        .with_attention(config.attention.clone(), config.training.seed)
        .unwrap_or_else(|e| panic!("{e}"));
    let d = &unordered.data.dataset;
    let model_config = config.model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes);
    let refused = trainer.check(&model_config, &unordered.data, 2).err();
    assert!(
        matches!(refused, Some(TrainError::InvalidConfig { field: "attention.block_reform", .. })),
        "{refused:?}"
    );

    // prepare() reorders the sequences under attention.reorder
    let reordered = Setup::new(config);
    trainer.check(&model_config, &reordered.data, 2).unwrap_or_else(|e| panic!("{e}"));
    let (loss, _, rows) = learner_history(&reordered, trainer, 1);
    assert!(loss[0].is_finite(), "{loss:?}");
    assert_eq!(rows, 0, "sparse steps build no distance rows");
}

//! A Burn user's own training setup — `SupervisedTraining`, a `Learner`, Burn's metrics,
//! checkpointer and early stopping — with megagraph's `MegaGraphTrainer` as the learning
//! strategy, on one device or on a `pp x cp x dp` mesh of CPU threads.
//!
//! ```sh
//! cargo run --release --example custom_learner                          # one device
//! cargo run --release --example custom_learner -- --pp 2 --cp 2         # 4 ranks: 2 stages x 2 context blocks
//! cargo run --release --example custom_learner -- --dataset ../shared/datasets/cora --epochs 50
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::optim::AdamWConfig;
use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::ElementConversion;
use burn::tensor::backend::Backend;
use clap::Parser;
use megagraph::ProgressRenderer;
use megagraph::parallel::ParallelConfig;
use megagraph::train::burn_train::metric::store::{Aggregate, Direction, Split};
use megagraph::train::burn_train::metric::{AccuracyMetric, LossMetric};
use megagraph::train::burn_train::{MetricEarlyStoppingStrategy, StoppingCondition, SupervisedTraining};
use megagraph::train::{
    MegaGraphTrainer, NodeClassifier, SequenceBatch, SequenceBatcher, SplitRole, SplitSequences,
    RunContext, TrainConfig, prepare,
};

type B = Autodiff<Flex>;

/// Train a Graph Transformer with burn-train and megagraph's learning strategy.
#[derive(Parser)]
struct Args {
    /// Dataset directory in the OGB node-property raw layout (default: the synthetic graph).
    #[arg(long, value_name = "DIR")]
    dataset: Option<PathBuf>,
    /// Number of epochs.
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    /// Nodes per sequence.
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    /// Pipeline stages (1 = no pipeline).
    #[arg(long, default_value_t = 1)]
    pp: usize,
    /// Context-parallel blocks per sequence (1 = none).
    #[arg(long, default_value_t = 1)]
    cp: usize,
    /// Data-parallel replicas (1 = none).
    #[arg(long, default_value_t = 1)]
    dp: usize,
    /// Where Burn writes its metric logs and checkpoints.
    #[arg(long, default_value = "target/custom_learner")]
    artifacts: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut config = TrainConfig::default();
    config.data.dataset = args.dataset.clone();
    config.data.seq_len = args.seq_len;
    config.model.dropout = 0.1;
    config.model.input_dropout = Some(0.5);
    config.model.key_dropout = Some(0.0);
    // MegaGraphTrainer scores the model's own logits (no propagation of them): the defaults and
    // the inputs of such a run, whatever the dataset's share of training labels
    config = config.resolved(RunContext::STANDARD);

    // Sequences with distance indexes, then Burn data loaders over the train and valid splits.
    let data = Arc::new(prepare(&config)?);
    let train = DataLoaderBuilder::<B, _, _>::new(SequenceBatcher::new(data.clone(), SplitRole::Train))
        .batch_size(args.batch_size)
        .shuffle(0)
        .build(SplitSequences::new(data.clone(), SplitRole::Train));
    // Validation runs without autodiff: its loader is on the inner backend.
    let valid = DataLoaderBuilder::<Flex, _, _>::new(SequenceBatcher::new(data.clone(), SplitRole::Valid))
        .batch_size(args.batch_size)
        .build(SplitSequences::new(data.clone(), SplitRole::Valid));

    // The user's own model, optimizer and learning-rate schedule.
    let device = Default::default();
    B::seed(&device, 0);
    let d = &data.dataset;
    let model_config = config.model_config(d.features.as_ref().map(|f| f.dim), d.graph.num_nodes(), d.num_classes);
    let steps = args.epochs * SplitSequences::new(data.clone(), SplitRole::Train).indices().len().div_ceil(args.batch_size);
    let optimizer = AdamWConfig::new().with_weight_decay(5e-3);

    // megagraph's strategy: one device, or the mesh given on the command line.
    let trainer = if args.pp * args.cp * args.dp == 1 {
        MegaGraphTrainer::<B>::single_device(device)
    } else {
        let mesh = ParallelConfig::uniform(args.pp, args.cp, args.dp, 1, model_config.num_layers)?;
        println!("training on the mesh {mesh:?} ({} worker threads)", args.pp * args.cp * args.dp);
        // the ranks' optimizer state is checkpointed next to Burn's checkpoints
        MegaGraphTrainer::<B>::parallel(mesh, vec![device]).with_optimizer_checkpoints(args.artifacts.join("mesh"))
    }
    .with_optimizer(optimizer);
    trainer.check(&model_config, &data, args.batch_size)?;
    // the learner holds the trainer's optimizer, the one every rank of a mesh runs
    let learner = trainer.learner(
        NodeClassifier::<B>::init(&model_config, &device),
        CosineAnnealingLrSchedulerConfig::new(2e-3, steps.max(1)).init()?,
    );

    // Burn's training loop with its metrics, checkpointer and early stopping.
    let result = SupervisedTraining::new(&args.artifacts, train, valid)
        .metrics((LossMetric::new(),))
        .metric_valid_numeric(AccuracyMetric::new())
        .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .early_stopping(MetricEarlyStoppingStrategy::new(
            &LossMetric::<B>::new(),
            Aggregate::Mean,
            Direction::Lowest,
            Split::Valid,
            StoppingCondition::NoImprovementSince { n_epochs: 10 },
        ))
        .renderer(ProgressRenderer::new())
        .num_epochs(args.epochs)
        .with_training_strategy(trainer.into_strategy())
        .launch(learner);

    // Test accuracy of the trained model, with the same batcher in a plain loop.
    let model = result.model;
    let batcher = SequenceBatcher::new(data.clone(), SplitRole::Test);
    let (mut correct, mut total) = (0usize, 0usize);
    for chunk in SplitSequences::new(data.clone(), SplitRole::Test).indices().chunks(args.batch_size) {
        let batch: SequenceBatch<Flex> = batcher.batch(chunk.to_vec(), &device);
        let output = model.forward_classification(batch.tensors());
        let predicted = output.output.argmax(1).flatten::<1>(0, 1);
        correct += predicted.equal(output.targets.clone()).int().sum().into_scalar().elem::<i64>() as usize;
        total += output.targets.dims()[0];
    }
    println!("test accuracy {:.4} ({correct}/{total} nodes)", correct as f64 / total.max(1) as f64);
    Ok(())
}

//! Failures stop the whole mesh quickly and name the rank; impossible configurations are
//! refused up front.

use crate::common;

use std::time::{Duration, Instant};

use common::{B, Synthetic, model};
use megagraph_parallel::{
    InjectedFault, ParallelConfig, ParallelConfigError, ParallelError, ParallelTrainer,
    TrainerOptions,
};

fn config(pp: usize, cp: usize, dp: usize, micro_batches: usize) -> ParallelConfig {
    ParallelConfig::uniform(pp, cp, dp, micro_batches, 2).unwrap_or_else(|e| panic!("{e}"))
}

fn start(
    config: ParallelConfig,
    source: Synthetic,
    fault: Option<InjectedFault>,
) -> ParallelTrainer<B> {
    let mut options = TrainerOptions::new(8, 8).with_timeout(Duration::from_secs(60));
    if let Some(fault) = fault {
        options = options.with_fault(fault);
    }
    ParallelTrainer::<B>::new(
        config,
        model(2, 3),
        source.shared(),
        options,
        vec![Default::default()],
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs steps until one fails; returns the error and how long that step took.
fn fail(trainer: &mut ParallelTrainer<B>) -> (ParallelError, Duration) {
    let sequences: Vec<usize> = (0..8).collect();
    for _ in 0..3 {
        let started = Instant::now();
        if let Err(error) = trainer.step(&sequences, 1e-3) {
            return (error, started.elapsed());
        }
    }
    panic!("no step failed");
}

#[test]
fn a_panicking_stage_stops_pipeline_and_ring() {
    let _turn = crate::turn();
    // rank 3 = stage 1, cp_rank 1: stage 0 waits for its gradients, its ring neighbour for
    // ring blocks
    let fault = InjectedFault { rank: 3, step: 1 };
    let mut trainer = start(config(2, 2, 1, 2), Synthetic::new(8, 8, 5), Some(fault));
    let (error, took) = fail(&mut trainer);
    assert!(
        matches!(&error, ParallelError::WorkerPanicked { rank: 3, message } if message.contains("injected")),
        "{error}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let again = trainer.step(&[0, 1, 2, 3], 1e-3);
    assert!(matches!(again, Err(ParallelError::Stopped(_))), "{again:?}");
    assert_eq!(again.err().and_then(|e| e.rank()), Some(3));
}

#[test]
fn a_panicking_replica_releases_the_all_reduce() {
    let _turn = crate::turn();
    // the other replicas wait in burn-collective's all-reduce for rank 2
    let fault = InjectedFault { rank: 2, step: 0 };
    let mut trainer = start(config(1, 1, 4, 1), Synthetic::new(8, 8, 5), Some(fault));
    let (error, took) = fail(&mut trainer);
    assert_eq!(error.rank(), Some(2), "{error}");
    assert!(
        matches!(error, ParallelError::WorkerPanicked { .. }),
        "{error}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    drop(trainer);
    // the collective is usable again by the next mesh
    let mut next = start(config(1, 1, 2, 1), Synthetic::new(8, 8, 5), None);
    let output = next.step(&(0..8).collect::<Vec<_>>(), 1e-3);
    assert!(output.is_ok(), "{output:?}");
}

#[test]
fn a_failing_batch_source_names_the_rank() {
    let _turn = crate::turn();
    let mut source = Synthetic::new(8, 8, 5);
    source.failing = Some(6);
    let mut trainer = start(config(1, 2, 2, 1), source, None);
    let (error, _) = fail(&mut trainer);
    // sequences 4..8 belong to replica 1: ranks 2 and 3 both ask for them
    match &error {
        ParallelError::Source { rank, message } => {
            assert!(*rank == 2 || *rank == 3, "{error}");
            assert!(message.contains("sequence 6"), "{error}");
        }
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn impossible_configurations_are_refused() {
    let _turn = crate::turn();
    let source = || Synthetic::new(8, 8, 5).shared();
    let options = || TrainerOptions::new(8, 8);
    let mut too_deep = ParallelConfig::single_device(2);
    too_deep.pp = 3;
    too_deep.stage_layers = vec![1, 1, 0];
    let err = ParallelTrainer::<B>::new(
        too_deep,
        model(2, 3),
        source(),
        options(),
        vec![Default::default()],
    )
    .err();
    assert_eq!(
        err,
        Some(ParallelError::Config(
            ParallelConfigError::MoreStagesThanLayers { pp: 3, layers: 2 }
        ))
    );
    let uneven = ParallelConfig {
        dp: 3,
        ..ParallelConfig::single_device(2)
    };
    let err = ParallelTrainer::<B>::new(
        uneven,
        model(2, 3),
        source(),
        options(),
        vec![Default::default()],
    )
    .err();
    assert_eq!(
        err,
        Some(ParallelError::Config(
            ParallelConfigError::DataDoesNotDivideSequences {
                dp: 3,
                sequences_per_step: 8
            }
        ))
    );
    let err = ParallelTrainer::<B>::new(
        config(1, 1, 2, 1),
        model(2, 3),
        source(),
        options(),
        vec![Default::default(); 3],
    )
    .err();
    assert_eq!(err, Some(ParallelError::DeviceCount { given: 3, world: 2 }));

    let mut trainer = start(config(1, 1, 2, 2), Synthetic::new(8, 8, 5), None);
    let err = trainer.step(&[0, 1, 2], 1e-3).err();
    assert_eq!(
        err,
        Some(ParallelError::TooFewSequences {
            sequences: 3,
            needed: 4
        })
    );
    // that refusal does not stop the mesh
    assert!(trainer.step(&[0, 1, 2, 3, 4], 1e-3).is_ok());
}

#[test]
fn a_second_reducing_mesh_in_the_process_waits_then_refuses() {
    let _turn = crate::turn();
    // burn-collective has one group per backend and process: while `first` lives, another mesh
    // that all-reduces cannot start
    let first = start(config(1, 1, 2, 1), Synthetic::new(8, 8, 5), None);
    let options = TrainerOptions::new(8, 8).with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let second = ParallelTrainer::<B>::new(
        config(1, 2, 1, 1),
        model(2, 3),
        Synthetic::new(8, 8, 5).shared(),
        options,
        vec![Default::default()],
    );
    assert!(
        matches!(second, Err(ParallelError::CollectiveBusy { .. })),
        "{:?}",
        second.err()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // a mesh without an all-reduce (one rank per stage group) does not need the collective
    let pipeline = ParallelTrainer::<B>::new(
        config(2, 1, 1, 2),
        model(2, 3),
        Synthetic::new(8, 8, 5).shared(),
        TrainerOptions::new(8, 8),
        vec![Default::default()],
    );
    assert!(pipeline.is_ok(), "{:?}", pipeline.err());
    drop(first);
}

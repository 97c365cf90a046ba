//! The critical-path optimization is exact: deferring cold memory write-backs to a background
//! thread, however slow that thread is, changes no number of a run.

use std::time::Duration;

use burn::backend::{Autodiff, Flex};
use megagraph_graph::temporal::{InteractionConfig, SplitFractions};
use megagraph_models::temporal::TemporalPreset;

use crate::observer::Quiet;
use crate::report::TemporalReport;
use crate::{TemporalDataset, TemporalScheme, TemporalSource, TemporalTrainConfig, TemporalTrainer};

fn data() -> TemporalDataset {
    let source = TemporalSource::Synthetic(InteractionConfig {
        num_events: 600,
        ..InteractionConfig::small()
    });
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

fn run(data: &TemporalDataset, scheme: TemporalScheme, workers: usize, critical_path: bool, delay: u64) -> TemporalReport {
    let _turn = crate::seeded_turn();
    let config = TemporalTrainConfig {
        model: TemporalPreset::Tgn,
        batch_size: 30,
        window: Some(120),
        epochs: 2,
        patience: 5,
        dim: 8,
        mrr_negatives: 0,
        seed: 5,
        // each batch's dropout masks are keyed by the batch, so multi-worker runs repeat exactly
        dropout: 0.1,
        workers,
        scheme: Some(scheme),
        critical_path: Some(critical_path),
        ..TemporalTrainConfig::default()
    };
    TemporalTrainer::new(&config, data)
        .with_write_back_delay(Duration::from_millis(delay))
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|err| panic!("{} x {workers}: {err}", scheme.name()))
}

/// Loss and validation AP of every epoch, and the test AP.
fn numbers(report: &TemporalReport) -> (Vec<(f64, f64)>, f64, f64) {
    let history = report.history.iter().map(|e| (e.loss, e.valid_ap)).collect();
    (history, report.test_ap, report.test_auc)
}

#[test]
fn deferred_write_backs_change_no_number() {
    let data = data();
    for (scheme, workers) in [
        (TemporalScheme::Depbloom, 2),
        (TemporalScheme::Minibatch, 2),
        (TemporalScheme::Depbloom, 1),
    ] {
        let immediate = run(&data, scheme, workers, false, 0);
        let deferred = run(&data, scheme, workers, true, 0);
        assert_eq!(numbers(&deferred), numbers(&immediate), "{} x {workers}", scheme.name());
        assert_eq!(deferred.sync_bytes_per_epoch, immediate.sync_bytes_per_epoch);
    }
}

/// A background thread that sleeps longer than a step before every write: were a batch to
/// read a node before its deferred write completed, it would read stale memory and the
/// losses would differ (and the debug assertion in the worker would fire).
#[test]
fn a_slow_background_write_back_still_completes_before_the_next_read() {
    let data = data();
    let immediate = run(&data, TemporalScheme::Memory, 2, false, 0);
    let slow = run(&data, TemporalScheme::Memory, 2, true, 40);
    assert_eq!(numbers(&slow), numbers(&immediate));
}

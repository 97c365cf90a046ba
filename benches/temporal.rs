//! Events per second of one TGN training epoch, the sampler and the model separately.
//!
//! The data: Wikipedia from `$MEGAGRAPH_DATA/temporal/wikipedia` when `MEGAGRAPH_DATA` is set,
//! else the built-in synthetic stream (60,000 events). Criterion times the sampling of one
//! training batch (negatives, neighbours, the batch's layout); then one training epoch runs
//! whole (TGN as TGL configures it: batches of 600, 10 most recent neighbours, width 100), and
//! the table splits its events per second into the sampler's share, measured over the same
//! epoch's batches, and the model's (what remains). Run: `cargo bench --bench temporal`.

use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex};
use criterion::Criterion;
use megagraph_graph::temporal::{
    EventDirection, InteractionConfig, NegativeSampler, SplitFractions, TemporalCsr, TemporalSampler,
};
use megagraph_temporal::{
    Neighbourhood, Quiet, TemporalDataset, TemporalSource, TemporalTrainConfig, TemporalTrainer,
};

fn dataset() -> TemporalDataset {
    let source = match std::env::var_os("MEGAGRAPH_DATA") {
        Some(root) => TemporalSource::Dir(std::path::PathBuf::from(root).join("temporal/wikipedia")),
        None => TemporalSource::Synthetic(InteractionConfig::default()),
    };
    TemporalDataset::load(&source, SplitFractions::default()).unwrap_or_else(|err| panic!("{err}"))
}

fn main() {
    let data = dataset();
    let config = TemporalTrainConfig {
        epochs: 1,
        mrr_negatives: 0,
        ..TemporalTrainConfig::default()
    };
    let stream = &data.stream;
    let sampler = TemporalSampler::new(TemporalCsr::new(stream, EventDirection::Undirected), config.sampler())
        .unwrap_or_else(|err| panic!("{err}"));
    let neighbourhood = Neighbourhood::Hops(sampler);
    let negatives = NegativeSampler::new(stream, config.seed).unwrap_or_else(|err| panic!("{err}"));
    let train = data.split.train.clone();
    let batches: Vec<_> =
        train.clone().step_by(config.batch_size).map(|s| s..(s + config.batch_size).min(train.end)).collect();
    let prepare = |index: usize| {
        let events = batches[index].clone();
        let drawn = negatives.sample(1, index as u64, events.len(), 1);
        neighbourhood
            .prepare(stream, events, &drawn, 1, index as u64)
            .unwrap_or_else(|err| panic!("{err}"))
    };

    let mut criterion = Criterion::default().configure_from_args().measurement_time(Duration::from_secs(5));
    let mut next = 0;
    criterion.bench_function("temporal/sample one batch of 600 (tgn)", |b| {
        b.iter(|| {
            next = (next + 1) % batches.len();
            prepare(next)
        })
    });
    criterion.final_summary();

    let started = Instant::now();
    for index in 0..batches.len() {
        std::hint::black_box(prepare(index));
    }
    let sampling = started.elapsed().as_secs_f64();
    let report = TemporalTrainer::new(&config, &data)
        .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)
        .unwrap_or_else(|err| panic!("{err}"));
    let events = train.len() as f64;
    let epoch = report.train_seconds;
    println!("\none TGN training epoch on {} ({} events, {} batches):", data.name, train.len(), batches.len());
    println!("| part | seconds | events/s |");
    println!("|---|---|---|");
    println!("| sampler (negatives + 10 recent neighbours) | {sampling:.2} | {:.0} |", events / sampling);
    println!("| model (the rest of the epoch) | {:.2} | {:.0} |", epoch - sampling, events / (epoch - sampling).max(1e-9));
    println!("| whole epoch | {epoch:.2} | {:.0} |", report.events_per_second);
}

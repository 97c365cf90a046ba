//! Search time over 64 devices (8 nodes x 8 H200) and 32 layers, profile fitting included.
//!
//! Run: `cargo bench --profile release -p megagraph-planner --bench search` (the release
//! profile reuses the workspace's release build of Burn).

use criterion::{Criterion, criterion_group, criterion_main};
use megagraph_planner::{
    ClusterSpec, ModelShape, SearchOptions, Workload, cluster_analytic_profile, plan,
};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

fn search_64_devices_32_layers(c: &mut Criterion) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/clusters/h200-4x8-infiniband-ndr.toml");
    let mut cluster = match ClusterSpec::from_toml_file(&file) {
        Ok(cluster) => cluster,
        Err(error) => {
            eprintln!("skipping the search bench: {error}");
            return;
        }
    };
    cluster.nodes = 8;
    cluster.name = "8 nodes x 8 H200 (IB NDR)".into();
    let shape = ModelShape {
        layers: 32,
        ..ModelShape::paper()
    };
    let workload = Workload {
        seq_len: 65_536,
        sequences_per_step: 64,
        dtype_bytes: 4,
        near_pairs_per_row: None,
    };
    let profile = match cluster_analytic_profile(&cluster, &shape, workload.dtype_bytes) {
        Ok(profile) => profile,
        Err(error) => {
            eprintln!("skipping the search bench: {error}");
            return;
        }
    };
    let options = SearchOptions::default();
    match plan(&cluster, &shape, &workload, &profile, &options) {
        Ok(report) => eprintln!(
            "64 devices, 32 layers: {} plans, {} rejections, best pp={} cp={} dp={} mb={} {:?}; one search {:.1} ms",
            report.candidates.len(),
            report.rejected.len(),
            report.best.layout.pp,
            report.best.layout.cp,
            report.best.layout.dp,
            report.best.layout.micro_batches,
            report.best.layout.stage_layers,
            report.search_seconds * 1e3
        ),
        Err(error) => eprintln!("search failed: {error}"),
    }
    c.bench_function("search_64_devices_32_layers", |b| {
        b.iter(|| {
            plan(
                black_box(&cluster),
                black_box(&shape),
                black_box(&workload),
                black_box(&profile),
                &options,
            )
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = search_64_devices_32_layers
}
criterion_main!(benches);

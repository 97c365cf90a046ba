//! Measurements printed for reports (ignored by default: run with `--ignored --nocapture`).
//!
//! ```text
//! MEGAGRAPH_DATA=../shared/datasets cargo test --release -p megagraph-graph --test measure -- --ignored --nocapture
//! ```

use std::path::PathBuf;
use std::time::Instant;

use megagraph_graph::{
    CsbmConfig, LoadOptions, PowerLawConfig, SequenceStrategy, edge_cut, load_ogb, node_sequences,
};

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("MEGAGRAPH_DATA") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!("skipped: MEGAGRAPH_DATA is not set");
            None
        }
    }
}

fn report(name: &str, graph: &megagraph_graph::Graph, seq_len: usize) {
    let random = edge_cut(graph, &node_sequences(graph, seq_len, SequenceStrategy::Random, 0));
    let start = Instant::now();
    let seqs = node_sequences(graph, seq_len, SequenceStrategy::Locality, 0);
    let took = start.elapsed();
    let local = edge_cut(graph, &seqs);
    println!(
        "{name}: N={} arcs={} seq_len={seq_len} sequences={} edge_cut random={random:.4} locality={local:.4} ({:.1}% of random) partition time {took:.2?}",
        graph.num_nodes(),
        graph.num_edges(),
        seqs.len(),
        100.0 * local / random,
    );
}

#[test]
#[ignore = "measurement; prints edge cuts"]
fn edge_cut_random_vs_locality() {
    let csbm = CsbmConfig::default().generate().expect("csbm");
    report("csbm-default", &csbm.graph, 256);
    if let Some(dir) = data_dir() {
        for name in ["cora", "citeseer", "amazon-photo", "actor", "email-eu-core", "polblogs"] {
            let ds = load_ogb(&dir.join(name), &LoadOptions::default()).expect(name);
            report(name, &ds.graph, 256);
        }
    }
}

#[test]
#[ignore = "measurement; prints timings"]
fn power_law_scale() {
    for (n, d) in [(200_000, 10.0), (1_000_000, 10.0)] {
        let start = Instant::now();
        let g = PowerLawConfig {
            num_nodes: n,
            avg_degree: d,
            ..PowerLawConfig::default()
        }
        .generate()
        .expect("power law");
        println!("power-law N={n} avg_degree={d}: {} arcs generated in {:.2?}", g.num_edges(), start.elapsed());
        report(&format!("power-law-{n}"), &g, 256);
    }
}

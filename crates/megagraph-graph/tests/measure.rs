//! Measurements printed for reports (ignored by default: run with `--ignored --nocapture`).
//!
//! ```text
//! MEGAGRAPH_DATA=../shared/datasets cargo test --release -p megagraph-graph --test measure -- --ignored --nocapture
//! ```

use std::path::PathBuf;
use std::time::Instant;

use megagraph_graph::{
    CsbmConfig, DistanceScope, LoadOptions, PowerLawConfig, SequenceStrategy, distance_indexes,
    edge_cut, load_ogb, node_sequences,
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
    let random = edge_cut(
        graph,
        &node_sequences(graph, seq_len, SequenceStrategy::Random, 0),
    );
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
        for name in [
            "cora",
            "citeseer",
            "amazon-photo",
            "actor",
            "email-eu-core",
            "polblogs",
        ] {
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
        println!(
            "power-law N={n} avg_degree={d}: {} arcs generated in {:.2?}",
            g.num_edges(),
            start.elapsed()
        );
        report(&format!("power-law-{n}"), &g, 256);
    }
}

#[test]
#[ignore = "measurement; writes an ogbn-arxiv-sized dataset (~250 MB uncompressed) to a temp dir"]
fn arxiv_sized_load_time() {
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use rand::{Rng, SeedableRng};
    use std::io::Write;

    let (n, m, dim) = (169_343usize, 1_166_243usize, 128usize);
    let dir = tempfile::tempdir().expect("tempdir");
    let raw = dir.path().join("raw");
    let split = dir.path().join("split").join("time");
    std::fs::create_dir_all(&raw).expect("mkdir");
    std::fs::create_dir_all(&split).expect("mkdir");
    let gz = |path: PathBuf, text: &str| {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(text.as_bytes()).expect("gzip");
        std::fs::write(path, enc.finish().expect("gzip")).expect("write");
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let start = Instant::now();
    let mut edges = String::with_capacity(m * 14);
    for _ in 0..m {
        edges.push_str(&format!(
            "{},{}\n",
            rng.random_range(0..n),
            rng.random_range(0..n)
        ));
    }
    let mut feats = String::with_capacity(n * dim * 11);
    for _ in 0..n {
        for j in 0..dim {
            if j > 0 {
                feats.push(',');
            }
            feats.push_str(&format!("{:.6}", rng.random::<f32>() * 2.0 - 1.0));
        }
        feats.push('\n');
    }
    let labels: String = (0..n).map(|i| format!("{}\n", i % 40)).collect();
    let ids = |r: std::ops::Range<usize>| r.map(|i| format!("{i}\n")).collect::<String>();
    let text_mb = (edges.len() + feats.len()) as f64 / 1e6;
    gz(raw.join("edge.csv.gz"), &edges);
    gz(raw.join("node-feat.csv.gz"), &feats);
    gz(raw.join("node-label.csv.gz"), &labels);
    gz(raw.join("num-node-list.csv.gz"), &format!("{n}\n"));
    gz(raw.join("num-edge-list.csv.gz"), &format!("{m}\n"));
    gz(split.join("train.csv.gz"), &ids(0..90_941));
    gz(split.join("valid.csv.gz"), &ids(90_941..120_740));
    gz(split.join("test.csv.gz"), &ids(120_740..n));
    println!(
        "fixture: {text_mb:.0} MB of CSV written in {:.2?}",
        start.elapsed()
    );

    let cache = tempfile::tempdir().expect("tempdir");
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    let start = Instant::now();
    let parsed = load_ogb(dir.path(), &LoadOptions::default()).expect("load");
    println!("parse (gzip CSV, no cache): {:.2?}", start.elapsed());
    let start = Instant::now();
    load_ogb(dir.path(), &options).expect("load");
    println!("parse + cache write: {:.2?}", start.elapsed());
    let start = Instant::now();
    let cached = load_ogb(dir.path(), &options).expect("load");
    println!("cache hit: {:.2?}", start.elapsed());
    assert_eq!(parsed, cached);
    assert_eq!(parsed.graph.num_input_edges(), m as u64);
    assert_eq!(parsed.feature_dim(), dim);
}

#[test]
#[ignore = "measurement; prints distance-index timings"]
fn distance_index_time() {
    let Some(dir) = data_dir() else { return };
    for name in ["cora", "amazon-photo"] {
        let ds = load_ogb(&dir.join(name), &LoadOptions::default()).expect(name);
        for strategy in [SequenceStrategy::Locality, SequenceStrategy::Random] {
            let seqs = node_sequences(&ds.graph, 256, strategy, 0);
            for scope in [DistanceScope::Graph, DistanceScope::Induced] {
                let start = Instant::now();
                let idx = distance_indexes(&ds.graph, &seqs, 5, scope).expect("distances");
                let took = start.elapsed();
                let pairs: usize = idx.iter().map(|i| i.as_bytes().len()).sum();
                let near = idx
                    .iter()
                    .flat_map(|i| i.as_bytes())
                    .filter(|&&d| d <= 5)
                    .count();
                println!(
                    "{name} {strategy:?} {scope:?} max_distance=5: {} sequences, {pairs} pairs ({:.1}% within 5 hops) in {took:.2?}",
                    idx.len(),
                    100.0 * near as f64 / pairs as f64
                );
            }
        }
    }
}

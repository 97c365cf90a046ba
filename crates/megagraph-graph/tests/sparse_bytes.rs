//! Bytes per sequence of [`SparseDistanceIndex`] vs the dense `[S, S]` [`DistanceIndex`] on the
//! shared datasets (`$MEGAGRAPH_DATA`, skipped when unset), for the sequences `megagraph train`
//! uses (locality partition, `seq_len` 256, seed 0, graph scope) and, for graphs of at most
//! 5,000 nodes, the whole graph as one sequence. Prints a table:
//!
//! ```text
//! MEGAGRAPH_DATA=../shared/datasets cargo test --release -p megagraph-graph --test sparse_bytes -- --nocapture
//! ```
//!
//! `density` is stored pairs / `S²`; a stored pair costs 5 bytes (column `u32` + bucket `u8`)
//! against 1 byte dense, so sparse is smaller below a density of about 0.2. Asserts only exact
//! facts: every sparse index equals the dense one's rows.

use std::path::PathBuf;
use std::time::Instant;

use megagraph_graph::{
    DistanceIndex, DistanceScope, Graph, LoadOptions, SequenceStrategy, SparseDistanceIndex,
    distance_indexes, load_ogb, node_sequences, sparse_distance_index_parallel,
    sparse_distance_indexes,
};

const DATASETS: &[&str] = &[
    "cora",
    "citeseer",
    "amazon-photo",
    "actor",
    "email-eu-core",
    "polblogs",
];

/// Largest graph built as one whole-graph sequence (its dense index is `N²` bytes).
const FULL_GRAPH_MAX_NODES: usize = 5_000;

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("MEGAGRAPH_DATA") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!("skipped: MEGAGRAPH_DATA is not set");
            None
        }
    }
}

/// Totals over the sequences of one (dataset, layout, max_distance) row of the table.
struct Row {
    sequences: usize,
    nnz: usize,
    sparse: usize,
    dense: usize,
}

fn print_row(name: &str, n: usize, layout: &str, max: u8, row: &Row) {
    let per = |b: usize| b as f64 / row.sequences as f64;
    println!(
        "| {name:<13} | {n:>5} | {layout:<12} | {max:>3} | {:>4} | {:>9.1} | {:>7.3} | {:>12.0} | {:>11.0} | {:>12.3} |",
        row.sequences,
        row.nnz as f64 / row.sequences as f64,
        row.nnz as f64 / row.dense as f64,
        per(row.sparse),
        per(row.dense),
        row.sparse as f64 / row.dense as f64,
    );
}

/// Sparse indexes of `seqs` (all rows), checked equal to the dense ones, with their totals.
fn sequences_row(graph: &Graph, seqs: &[Vec<u32>], max: u8, name: &str) -> Row {
    let scope = DistanceScope::Graph;
    let sparse = sparse_distance_indexes(graph, seqs, None, max, scope).expect("sparse");
    let dense = distance_indexes(graph, seqs, max, scope).expect("dense");
    for (k, (s, d)) in sparse.iter().zip(&dense).enumerate() {
        assert_eq!(s.to_dense_rows(), d.as_bytes(), "{name} sequence {k}");
    }
    Row {
        sequences: seqs.len(),
        nnz: sparse.iter().map(SparseDistanceIndex::nnz).sum(),
        sparse: sparse.iter().map(SparseDistanceIndex::bytes).sum(),
        dense: sparse.iter().map(SparseDistanceIndex::dense_bytes).sum(),
    }
}

/// The whole graph as one sequence, built row-parallel, checked against the dense index.
fn full_graph_row(graph: &Graph, max: u8, name: &str) -> Row {
    let nodes: Vec<u32> = (0..graph.num_nodes() as u32).collect();
    let scope = DistanceScope::Graph;
    let start = Instant::now();
    let sparse = sparse_distance_index_parallel(graph, &nodes, 0..nodes.len(), max, scope, &|_| {})
        .expect("sparse");
    let took = start.elapsed();
    let dense = DistanceIndex::new(graph, &nodes, max, scope).expect("dense");
    assert_eq!(
        sparse.to_dense_rows(),
        dense.as_bytes(),
        "{name} full graph"
    );
    eprintln!("{name}: full-graph sparse index (max {max}) built in {took:.2?}");
    Row {
        sequences: 1,
        nnz: sparse.nnz(),
        sparse: sparse.bytes(),
        dense: sparse.dense_bytes(),
    }
}

#[test]
fn sparse_vs_dense_bytes_per_sequence() {
    let Some(root) = data_dir() else { return };
    println!(
        "| dataset       |     N | layout       | max | seqs |   nnz/seq | density | sparse B/seq | dense B/seq | sparse/dense |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for name in DATASETS {
        let ds = load_ogb(&root.join(name), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = &ds.graph;
        let n = g.num_nodes();
        let seqs = node_sequences(g, 256, SequenceStrategy::Locality, 0);
        for max in [4u8, 3] {
            print_row(
                name,
                n,
                "locality-256",
                max,
                &sequences_row(g, &seqs, max, name),
            );
            if n <= FULL_GRAPH_MAX_NODES {
                print_row(name, n, "whole graph", max, &full_graph_row(g, max, name));
            }
        }
    }
}

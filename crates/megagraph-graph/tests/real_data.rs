//! Loads the shared datasets (`$MEGAGRAPH_DATA`, skipped when unset) and checks them against
//! their `meta.json`.

use std::path::{Path, PathBuf};

use megagraph_graph::{
    DistanceScope, LoadOptions, SequenceStrategy, distance_indexes, load_ogb, node_sequences,
};
use serde_json::Value;

const DATASETS: &[&str] = &[
    "cora",
    "citeseer",
    "amazon-photo",
    "actor",
    "email-eu-core",
    "polblogs",
];

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("MEGAGRAPH_DATA") {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!(
                "skipped: MEGAGRAPH_DATA is not set (point it at the shared datasets folder)"
            );
            None
        }
    }
}

fn meta(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("meta.json")).expect("meta.json");
    serde_json::from_str(&text).expect("meta.json parses")
}

fn count(meta: &Value, key: &str) -> Option<u64> {
    meta.get(key).and_then(Value::as_u64)
}

#[test]
fn shared_datasets_match_their_meta() {
    let Some(root) = data_dir() else { return };
    for name in DATASETS {
        let dir = root.join(name);
        let m = meta(&dir);
        let ds = load_ogb(&dir, &LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = &ds.graph;
        assert_eq!(ds.name, *name);
        assert_eq!(
            Some(g.num_nodes() as u64),
            count(&m, "num_nodes"),
            "{name} nodes"
        );
        assert_eq!(
            Some(g.num_input_edges()),
            count(&m, "num_edge_rows"),
            "{name} edge rows"
        );
        assert_eq!(
            Some(ds.num_classes as u64),
            count(&m, "num_classes"),
            "{name} classes"
        );
        assert_eq!(
            Some(ds.num_labeled() as u64),
            count(&m, "num_labeled"),
            "{name} labelled"
        );
        assert_eq!(ds.labels.len(), g.num_nodes());
        match count(&m, "num_features") {
            Some(dim) => {
                let f = ds
                    .features
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: no features"));
                assert_eq!(
                    (f.num_nodes, f.dim as u64),
                    (g.num_nodes(), dim),
                    "{name} features"
                );
                assert_eq!(f.values.len(), f.num_nodes * f.dim);
            }
            None => assert!(ds.features.is_none(), "{name}: unexpected features"),
        }
        let sizes = &m["split_sizes"];
        assert_eq!(
            Some(ds.split.train.len() as u64),
            count(sizes, "train"),
            "{name} train"
        );
        assert_eq!(
            Some(ds.split.valid.len() as u64),
            count(sizes, "valid"),
            "{name} valid"
        );
        assert_eq!(
            Some(ds.split.test.len() as u64),
            count(sizes, "test"),
            "{name} test"
        );
        // Symmetrized by default: every arc has its reverse, no self loops.
        assert!(g.is_symmetric());
        for (u, v) in g.arcs() {
            assert!(u != v && g.has_edge(v, u), "{name}: arc {u}->{v}");
        }
        // Graphs shipped symmetrized keep their arc count.
        if m.get("symmetrized").and_then(Value::as_bool) == Some(true) {
            assert_eq!(
                Some(g.num_edges() as u64),
                count(&m, "num_edge_rows"),
                "{name} arcs"
            );
        }
        eprintln!(
            "{name}: {} nodes, {} rows -> {} arcs, {} features, {} classes",
            g.num_nodes(),
            g.num_input_edges(),
            g.num_edges(),
            ds.feature_dim(),
            ds.num_classes
        );
    }
}

#[test]
fn shared_datasets_roundtrip_through_the_cache() {
    let Some(root) = data_dir() else { return };
    let cache = tempfile::tempdir().expect("tempdir");
    let options = LoadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..LoadOptions::default()
    };
    for name in DATASETS {
        let dir = root.join(name);
        let fresh = load_ogb(&dir, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let cached = load_ogb(&dir, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(fresh, cached, "{name}");
    }
}

#[test]
fn cora_sequences_and_distances() {
    let Some(root) = data_dir() else { return };
    let ds = load_ogb(&root.join("cora"), &LoadOptions::default()).expect("cora");
    let seqs = node_sequences(&ds.graph, 256, SequenceStrategy::Locality, 0);
    let mut seen = vec![false; ds.graph.num_nodes()];
    for s in &seqs {
        assert!(s.len() <= 256);
        for &v in s {
            assert!(!std::mem::replace(&mut seen[v as usize], true));
        }
    }
    assert!(seen.iter().all(|&s| s));
    for scope in [DistanceScope::Graph, DistanceScope::Induced] {
        let idx = distance_indexes(&ds.graph, &seqs, 5, scope).expect("distances");
        assert_eq!(idx.len(), seqs.len());
        for (i, s) in idx.iter().zip(&seqs) {
            assert_eq!(i.as_bytes().len(), s.len() * s.len());
            // Symmetric graph: symmetric distances.
            for a in 0..s.len() {
                for b in 0..s.len() {
                    assert_eq!(i.get(a, b), i.get(b, a));
                }
            }
        }
    }
}

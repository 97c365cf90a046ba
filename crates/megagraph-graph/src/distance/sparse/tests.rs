use super::*;
use crate::distance::tests::{random_case, random_graph};
use crate::graph::GraphOptions;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SCOPES: [DistanceScope; 2] = [DistanceScope::Graph, DistanceScope::Induced];
const MAXES: [u8; 6] = [0, 1, 2, 3, 5, 254];

fn random_range(rng: &mut ChaCha8Rng, len: usize) -> Range<usize> {
    let a = rng.random_range(0..=len);
    let b = rng.random_range(0..=len);
    a.min(b)..a.max(b)
}

#[test]
fn matches_dense_on_random_graphs_rows_and_tiles() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for trial in 0..60 {
        let (g, nodes) = random_case(&mut rng, 1..60, 3, trial % 2 == 0);
        let (nodes, s) = (&nodes[..], nodes.len());
        let mut ws = DistanceWorkspace::new(g.num_nodes());
        for max in MAXES {
            for scope in SCOPES {
                let dense = DistanceIndex::new(&g, nodes, max, scope).unwrap();
                let rows = random_range(&mut rng, s);
                let ctx = format!("trial {trial} max {max} {scope:?} rows {rows:?}");
                let sparse = if trial % 3 == 0 {
                    SparseDistanceIndex::new(&g, nodes, rows.clone(), max, scope).unwrap()
                } else {
                    // A reused workspace must give the same result.
                    SparseDistanceIndex::with_workspace(
                        &g,
                        nodes,
                        rows.clone(),
                        max,
                        scope,
                        &mut ws,
                    )
                    .unwrap()
                };
                let expected = &dense.as_bytes()[rows.start * s..rows.end * s];
                assert_eq!(sparse.to_dense_rows(), expected, "{ctx}");
                assert_eq!(
                    sparse,
                    SparseDistanceIndex::from_dense(&dense, rows.clone()).unwrap(),
                    "{ctx}"
                );
                assert_eq!(sparse.len(), rows.len());
                assert_eq!(sparse.global_rows(), rows.clone());
                assert_eq!(sparse.seq_len(), s);
                assert_eq!(sparse.num_buckets(), dense.num_buckets());
                assert_eq!(sparse.far_bucket(), max + 1);
                let stored = expected.iter().filter(|&&b| b <= max).count();
                assert_eq!(sparse.nnz(), stored, "{ctx}");
                assert_eq!(sparse.bytes(), 8 * (rows.len() + 1) + 5 * stored);
                assert_eq!(sparse.dense_bytes(), rows.len() * s);
                for local in 0..sparse.len() {
                    let (cols, buckets) = sparse.row(local);
                    assert!(cols.windows(2).all(|c| c[0] < c[1]), "{ctx}");
                    assert!(buckets.iter().all(|&b| b <= max), "{ctx}");
                    let global = rows.start + local;
                    assert_eq!(sparse.get(local, global), 0, "{ctx} diagonal");
                }
                for _ in 0..4 {
                    let tr = random_range(&mut rng, rows.len());
                    let tc = random_range(&mut rng, s);
                    let mut tile = vec![77; tr.len() * tc.len()];
                    sparse.fill_tile(tr.clone(), tc.clone(), &mut tile);
                    for (a, r) in tr.clone().enumerate() {
                        for (b, c) in tc.clone().enumerate() {
                            let want = dense.get(rows.start + r, c);
                            assert_eq!(tile[a * tc.len() + b], want, "{ctx} tile");
                            assert_eq!(sparse.get(r, c), want, "{ctx} get");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn empty_ranges_and_sequences() {
    let g = Graph::from_edges(4, &[(0, 1), (1, 2)], &GraphOptions::default()).unwrap();
    let nodes = [0, 2, 3];
    for start in 0..=3 {
        let idx =
            SparseDistanceIndex::new(&g, &nodes, start..start, 4, DistanceScope::Graph).unwrap();
        assert!(idx.is_empty());
        assert_eq!((idx.nnz(), idx.first_row(), idx.seq_len()), (0, start, 3));
        assert_eq!(idx.row_offsets(), &[0]);
        assert!(idx.to_dense_rows().is_empty());
    }
    let idx = SparseDistanceIndex::new(&g, &nodes, 0..3, 4, DistanceScope::Graph).unwrap();
    assert_eq!(idx.columns(), &[0, 1, 0, 1, 2]);
    assert_eq!(idx.buckets(), &[0, 2, 2, 0, 0]);
    assert_eq!(idx.row_offsets(), &[0, 2, 4, 5]);
    let mut none: [u8; 0] = [];
    idx.fill_tile(1..1, 0..3, &mut none);
    idx.fill_tile(0..3, 2..2, &mut none);
    let empty = SparseDistanceIndex::new(&g, &[], 0..0, 2, DistanceScope::Graph).unwrap();
    assert_eq!((empty.len(), empty.seq_len(), empty.nnz()), (0, 0, 0));
}

#[test]
fn bad_inputs_are_errors() {
    let g = Graph::from_edges(3, &[(0, 1)], &GraphOptions::default()).unwrap();
    let scope = DistanceScope::Graph;
    assert!(matches!(
        SparseDistanceIndex::new(&g, &[0, 1], 0..2, 255, scope),
        Err(GraphError::MaxDistanceTooLarge { max_distance: 255 })
    ));
    assert!(matches!(
        SparseDistanceIndex::new(&g, &[0, 3], 0..1, 2, scope),
        Err(GraphError::NodeOutOfRange {
            node: 3,
            position: 1,
            ..
        })
    ));
    assert!(matches!(
        SparseDistanceIndex::new(&g, &[1, 0, 1], 0..1, 2, scope),
        Err(GraphError::DuplicateNode {
            node: 1,
            first: 0,
            second: 2
        })
    ));
    assert!(matches!(
        SparseDistanceIndex::new(&g, &[0, 1], 1..3, 2, scope),
        Err(GraphError::RowRangeOutOfBounds {
            start: 1,
            end: 3,
            seq_len: 2
        })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 2..1;
    assert!(matches!(
        SparseDistanceIndex::new(&g, &[0, 1, 2], reversed, 2, scope),
        Err(GraphError::RowRangeOutOfBounds { .. })
    ));
    let dense = DistanceIndex::new(&g, &[0, 1], 2, scope).unwrap();
    assert!(matches!(
        SparseDistanceIndex::from_dense(&dense, 0..3),
        Err(GraphError::RowRangeOutOfBounds { .. })
    ));
    assert!(matches!(
        SparseDistanceIndex::with_workspace(
            &g,
            &[0],
            0..1,
            2,
            scope,
            &mut DistanceWorkspace::new(5)
        ),
        Err(GraphError::InvalidConfig {
            field: "workspace",
            ..
        })
    ));
}

#[test]
#[should_panic(expected = "tile buffer")]
fn fill_tile_checks_the_buffer() {
    let g = Graph::from_edges(2, &[(0, 1)], &GraphOptions::default()).unwrap();
    let idx = SparseDistanceIndex::new(&g, &[0, 1], 0..2, 2, DistanceScope::Graph).unwrap();
    idx.fill_tile(0..2, 0..2, &mut [0; 3]);
}

#[test]
fn serde_round_trips_and_rejects_malformed() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let g = random_graph(&mut rng, 40, 90, true);
    let nodes: Vec<u32> = (0..40).collect();
    let idx = SparseDistanceIndex::new(&g, &nodes, 5..30, 3, DistanceScope::Graph).unwrap();
    assert!(
        idx.row(0).0.len() >= 2,
        "the test swaps two columns of row 0"
    );
    let json = serde_json::to_string(&idx).unwrap();
    let back: SparseDistanceIndex = serde_json::from_str(&json).unwrap();
    assert_eq!(back, idx);
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for (field, bad) in [
        ("first_row", serde_json::json!(20)),
        ("row_offsets", serde_json::json!([])),
        ("columns", serde_json::json!([0])),
        ("max_distance", serde_json::json!(0)),
        ("seq_len", serde_json::json!(10)),
    ] {
        let saved = v[field].clone();
        v[field] = bad;
        assert!(
            serde_json::from_value::<SparseDistanceIndex>(v.clone()).is_err(),
            "{field}"
        );
        v[field] = saved;
    }
    // Swapping two columns of a row breaks the ascending order.
    let cols = v["columns"].as_array_mut().unwrap();
    cols.swap(0, 1);
    assert!(serde_json::from_value::<SparseDistanceIndex>(v).is_err());
}

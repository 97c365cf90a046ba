use super::*;
use crate::graph::{GraphOptions, SelfLoops};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::ops::Range;

/// Plain full BFS over an adjacency restricted to `allowed`.
fn reference(graph: &Graph, nodes: &[u32], max: u8, scope: DistanceScope) -> Vec<u8> {
    let n = graph.num_nodes();
    let allowed: Vec<bool> = match scope {
        DistanceScope::Graph => vec![true; n],
        DistanceScope::Induced => {
            let mut a = vec![false; n];
            for &v in nodes {
                a[v as usize] = true;
            }
            a
        }
    };
    let mut out = Vec::new();
    for &s in nodes {
        let mut dist = vec![usize::MAX; n];
        dist[s as usize] = 0;
        let mut q = VecDeque::from([s]);
        while let Some(u) = q.pop_front() {
            for &w in graph.neighbors(u) {
                if allowed[w as usize] && dist[w as usize] == usize::MAX {
                    dist[w as usize] = dist[u as usize] + 1;
                    q.push_back(w);
                }
            }
        }
        for &t in nodes {
            let d = dist[t as usize];
            out.push(if d > usize::from(max) {
                max + 1
            } else {
                d as u8
            });
        }
    }
    out
}

/// A graph of `n` nodes and `m` random arcs (self-loops kept).
pub(super) fn random_graph(rng: &mut ChaCha8Rng, n: usize, m: usize, symmetrize: bool) -> Graph {
    let edges: Vec<(u32, u32)> = (0..m)
        .map(|_| (rng.random_range(0..n as u32), rng.random_range(0..n as u32)))
        .collect();
    let options = GraphOptions {
        symmetrize,
        self_loops: SelfLoops::Keep,
    };
    Graph::from_edges(n, &edges, &options).unwrap()
}

/// A random graph of `n` nodes, `n` drawn from `nodes`, with fewer than `arcs_per_node * n`
/// random arcs, and a random sequence of 1 to `n` of its nodes: `(graph, sequence)`.
pub(super) fn random_case(
    rng: &mut ChaCha8Rng,
    nodes: Range<usize>,
    arcs_per_node: usize,
    symmetrize: bool,
) -> (Graph, Vec<u32>) {
    let n = rng.random_range(nodes);
    let m = rng.random_range(0..arcs_per_node * n);
    let g = random_graph(rng, n, m, symmetrize);
    let mut all: Vec<u32> = (0..n as u32).collect();
    all.shuffle(rng);
    all.truncate(rng.random_range(1..=n));
    (g, all)
}

/// A random 300-node graph and its nodes, shuffled, in sequences of 37.
pub(super) fn chunked_case(rng: &mut ChaCha8Rng) -> (Graph, Vec<Vec<u32>>) {
    let g = random_graph(rng, 300, 900, true);
    let mut all: Vec<u32> = (0..300).collect();
    all.shuffle(rng);
    (g, all.chunks(37).map(<[u32]>::to_vec).collect())
}

#[test]
fn matches_reference_bfs_on_random_graphs() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for trial in 0..60 {
        let (g, nodes) = random_case(&mut rng, 1..60, 3, trial % 2 == 0);
        let (nodes, s) = (&nodes[..], nodes.len());
        for max in [0u8, 1, 2, 3, 5, 254] {
            for scope in [DistanceScope::Graph, DistanceScope::Induced] {
                let idx = DistanceIndex::new(&g, nodes, max, scope).unwrap();
                let expected = reference(&g, nodes, max, scope);
                assert_eq!(
                    idx.as_bytes(),
                    &expected[..],
                    "trial {trial} max {max} {scope:?}"
                );
                assert_eq!(idx.len(), s);
                assert_eq!(idx.num_buckets(), usize::from(max) + 2);
                for i in 0..s {
                    assert_eq!(idx.get(i, i), 0);
                }
            }
        }
    }
}

#[test]
fn bfs_budget_never_shortens_and_is_exact_where_not_hit() {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let mut truncated_seen = 0usize;
    for trial in 0..50 {
        let (g, nodes) = random_case(&mut rng, 2..70, 4, trial % 2 == 0);
        let (nodes, s) = (&nodes[..], nodes.len());
        let mut ws = DistanceWorkspace::new(g.num_nodes());
        for max in [1u8, 2, 3, 5] {
            for scope in [DistanceScope::Graph, DistanceScope::Induced] {
                let exact = reference(&g, nodes, max, scope);
                let query = |budget| DistanceQuery::exact(max, scope).with_budget(budget);
                let build_dense = |budget, ws: &mut DistanceWorkspace| {
                    DistanceIndex::with_workspace_budget(&g, nodes, query(budget), ws).unwrap()
                };
                let build_sparse = |rows: Range<usize>, budget, ws: &mut DistanceWorkspace| {
                    SparseDistanceIndex::with_workspace_budget(&g, nodes, rows, query(budget), ws).unwrap()
                };
                // (a) No cap, or one no BFS can reach, gives the exact BFS.
                for budget in [
                    BfsBudget::EXACT,
                    BfsBudget {
                        max_arcs_per_source: Some(g.num_edges()),
                    },
                ] {
                    let dense = build_dense(budget, &mut ws);
                    assert_eq!(dense.as_bytes(), &exact[..], "trial {trial} {budget:?}");
                    let sparse = build_sparse(0..s, budget, &mut ws);
                    assert_eq!(sparse.truncated_rows(), 0);
                    assert_eq!(sparse.to_dense_rows(), exact);
                }
                // (b) With a cap: never shorter, stored buckets exact, rows that did not
                // hit the cap exact.
                for cap in [0usize, 1, 2, 3, 5, 8, 13, 40] {
                    let budget = BfsBudget {
                        max_arcs_per_source: Some(cap),
                    };
                    let dense = build_dense(budget, &mut ws);
                    let sparse = build_sparse(0..s, budget, &mut ws);
                    assert_eq!(sparse.to_dense_rows(), dense.as_bytes());
                    truncated_seen += sparse.truncated_rows();
                    for i in 0..s {
                        let row = build_sparse(i..i + 1, budget, &mut ws);
                        let exact_row = &exact[i * s..(i + 1) * s];
                        if row.truncated_rows() == 0 {
                            assert_eq!(dense.row(i), exact_row, "trial {trial} row {i}");
                        }
                        for (j, (&c, &e)) in dense.row(i).iter().zip(exact_row).enumerate() {
                            assert!(c >= e, "trial {trial} cap {cap} ({i},{j}): {c} < {e}");
                            if c <= max {
                                assert_eq!(c, e, "trial {trial} cap {cap} ({i},{j})");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        truncated_seen > 100,
        "the caps were hit only {truncated_seen} times"
    );
}

#[test]
fn bfs_budget_default_and_serde() {
    assert_eq!(
        BfsBudget::default().max_arcs_per_source,
        Some(DEFAULT_MAX_ARCS_PER_SOURCE)
    );
    let parsed: BfsBudget = serde_json::from_str("{}").unwrap();
    assert_eq!(parsed, BfsBudget::default());
    let exact: BfsBudget = serde_json::from_str(r#"{"max_arcs_per_source": null}"#).unwrap();
    assert_eq!(exact, BfsBudget::EXACT);
}

#[test]
fn unreachable_is_max_plus_one_and_scopes_differ() {
    // Path 0 - 1 - 2 plus isolated 3; sequence without the middle node.
    let g = Graph::from_edges(4, &[(0, 1), (1, 2)], &GraphOptions::default()).unwrap();
    let nodes = [0, 2, 3];
    let graph = DistanceIndex::new(&g, &nodes, 4, DistanceScope::Graph).unwrap();
    assert_eq!(graph.as_bytes(), &[0, 2, 5, 2, 0, 5, 5, 5, 0]);
    let induced = DistanceIndex::new(&g, &nodes, 4, DistanceScope::Induced).unwrap();
    assert_eq!(induced.as_bytes(), &[0, 5, 5, 5, 0, 5, 5, 5, 0]);
    let short = DistanceIndex::new(&g, &nodes, 1, DistanceScope::Graph).unwrap();
    assert_eq!(short.get(0, 1), 2, "distance 2 > max 1 is the far bucket");
}

#[test]
fn directed_arcs_are_followed_one_way() {
    let options = GraphOptions {
        symmetrize: false,
        self_loops: SelfLoops::Remove,
    };
    let g = Graph::from_edges(3, &[(0, 1), (1, 2)], &options).unwrap();
    let idx = DistanceIndex::new(&g, &[0, 1, 2], 3, DistanceScope::Graph).unwrap();
    assert_eq!(idx.row(0), &[0, 1, 2]);
    assert_eq!(idx.row(2), &[4, 4, 0]);
}

#[test]
fn bad_inputs_are_errors() {
    let g = Graph::from_edges(3, &[(0, 1)], &GraphOptions::default()).unwrap();
    assert!(matches!(
        DistanceIndex::new(&g, &[0, 1], 255, DistanceScope::Graph),
        Err(GraphError::MaxDistanceTooLarge { max_distance: 255 })
    ));
    assert!(matches!(
        DistanceIndex::new(&g, &[0, 3], 2, DistanceScope::Graph),
        Err(GraphError::NodeOutOfRange {
            node: 3,
            position: 1,
            ..
        })
    ));
    assert!(matches!(
        DistanceIndex::new(&g, &[1, 0, 1], 2, DistanceScope::Induced),
        Err(GraphError::DuplicateNode {
            node: 1,
            first: 0,
            second: 2
        })
    ));
    assert!(matches!(
        distance_indexes(&g, &[vec![0]], 255, DistanceScope::Graph),
        Err(GraphError::MaxDistanceTooLarge { .. })
    ));
}

#[test]
fn parallel_matches_single() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (g, seqs) = chunked_case(&mut rng);
    let many = distance_indexes(&g, &seqs, 3, DistanceScope::Graph).unwrap();
    assert_eq!(many.len(), seqs.len());
    for (idx, seq) in many.iter().zip(&seqs) {
        assert_eq!(
            idx,
            &DistanceIndex::new(&g, seq, 3, DistanceScope::Graph).unwrap()
        );
    }
}

#[test]
fn progress_ticks_once_per_sequence() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let edges: Vec<(u32, u32)> = (0..99).map(|i| (i, i + 1)).collect();
    let graph = Graph::from_edges(100, &edges, &GraphOptions::default()).unwrap();
    let sequences: Vec<Vec<u32>> = (0..10).map(|s| (s * 10..s * 10 + 10).collect()).collect();
    let ticks = AtomicUsize::new(0);
    let with = distance_indexes_with_progress(&graph, &sequences, 3, DistanceScope::Graph, &|n| {
        ticks.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(ticks.into_inner(), 10);
    let without = distance_indexes(&graph, &sequences, 3, DistanceScope::Graph).unwrap();
    assert_eq!(with, without);
}

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::balance::{Balance, side_weight};
use super::bisect::{bisect, cut_weight};
use super::coarsen::{coarse_members, coarsen_once, estimated_shrink};
use super::refine::{enforce, refine};
use super::weighted::WeightedGraph;
use crate::graph::{Graph, GraphOptions};

fn unit(graph: &Graph) -> WeightedGraph {
    WeightedGraph::from_graph(graph)
}

/// The unit-weight graph of a default CSBM dataset of `num_nodes` nodes.
fn csbm(num_nodes: usize) -> WeightedGraph {
    let config = crate::synthetic::CsbmConfig {
        num_nodes,
        ..Default::default()
    };
    unit(&config.generate().unwrap().graph)
}

fn tiebreak(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random()).collect()
}

#[test]
fn refinement_lowers_the_cut_within_bounds() {
    let g = csbm(600);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut side: Vec<u8> = (0..600).map(|v| u8::from(v % 2 == 1)).collect();
    side.shuffle(&mut rng);
    let before = cut_weight(&g, &side);
    let balance = Balance {
        target: 300,
        lo: 290,
        hi: 310,
    };
    refine(&g, &mut side, balance, &tiebreak(600, 1));
    let size0 = side_weight(&g, &side);
    assert!((290..=310).contains(&size0), "size0 {size0}");
    let after = cut_weight(&g, &side);
    assert!(after < before * 3 / 4, "cut {before} -> {after}");
}

#[test]
fn refinement_restores_balance_from_an_infeasible_start() {
    let g = csbm(400);
    let mut side: Vec<u8> = (0..400).map(|v| u8::from(v >= 300)).collect();
    let balance = Balance {
        target: 200,
        lo: 200,
        hi: 200,
    };
    refine(&g, &mut side, balance, &tiebreak(400, 2));
    enforce(&g, &mut side, balance);
    assert_eq!(side_weight(&g, &side), 200);
}

#[test]
fn coarsening_preserves_weights_and_cut() {
    let g = csbm(1000);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (coarse, map) = coarsen_once(&g, 4, &tiebreak(1000, 3), &mut rng).unwrap();
    assert!(coarse.len() < 700, "coarsened only to {}", coarse.len());
    assert_eq!(
        coarse
            .node_weights
            .iter()
            .map(|&w| w as usize)
            .sum::<usize>(),
        1000
    );
    assert_eq!(
        coarse
            .edge_weights
            .iter()
            .map(|&w| w as usize)
            .sum::<usize>()
            + {
                // Edges inside a coarse node disappear.
                (0..1000)
                    .map(|v| g.edges(v).filter(|&(w, _)| map[w] == map[v]).count())
                    .sum::<usize>()
            },
        g.targets.len()
    );
    // Any coarse bisection has the same cut on the fine graph.
    let coarse_side: Vec<u8> = (0..coarse.len()).map(|c| (c % 3 == 0) as u8).collect();
    let fine_side: Vec<u8> = map.iter().map(|&c| coarse_side[c as usize]).collect();
    assert_eq!(
        cut_weight(&coarse, &coarse_side),
        cut_weight(&g, &fine_side)
    );
}

#[test]
fn sampled_shrink_estimate_is_close_to_the_real_one() {
    for graph in [
        crate::synthetic::CsbmConfig {
            num_nodes: 4000,
            ..Default::default()
        }
        .generate()
        .unwrap()
        .graph,
        crate::synthetic::PowerLawConfig {
            num_nodes: 20_000,
            ..Default::default()
        }
        .generate()
        .unwrap()
        .into(),
    ] {
        let g = unit(&graph);
        let n = g.len();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (coarse, map) = coarsen_once(&g, 4, &tiebreak(n, 5), &mut rng).unwrap();
        let members = coarse_members(&map, coarse.len());
        let real = coarse.targets.len() as f64 / g.targets.len() as f64;
        let estimate = estimated_shrink(&g, &map, &members, &mut rng);
        assert!(
            (estimate - real).abs() < 0.08,
            "{n} nodes: estimate {estimate:.3}, real {real:.3}"
        );
    }
}

#[test]
fn zero_slack_bisection_finds_the_planted_cut() {
    // Two 100-node cliques joined by a perfect matching, exact 100/100 balance required.
    let mut edges = Vec::new();
    for c in 0..2u32 {
        for i in 0..100 {
            for j in (i + 1)..100 {
                edges.push((c * 100 + i, c * 100 + j));
            }
        }
    }
    for i in 0..100 {
        edges.push((i, 100 + i));
    }
    let graph = Graph::from_edges(200, &edges, &GraphOptions::default()).unwrap();
    let g = unit(&graph);
    let (side, _) = bisect(
        &g,
        Balance {
            target: 100,
            lo: 100,
            hi: 100,
        },
        true,
        4,
    );
    assert_eq!(side_weight(&g, &side), 100);
    assert_eq!(cut_weight(&g, &side), 100);
}

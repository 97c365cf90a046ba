//! The "simulated cluster" report: the paper's model on 1-32 simulated H200s.
//!
//! `cargo test --release -p megagraph-planner --test simulated_report -- --ignored --nocapture`
//! prints the table.

use megagraph_planner::{ClusterSpec, SimulatedReport, SimulatedStudy};
use std::path::Path;

fn cluster(file: &str) -> ClusterSpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/clusters")
        .join(file);
    ClusterSpec::from_toml_file(&path).unwrap_or_else(|error| panic!("{error}"))
}

fn report() -> SimulatedReport {
    run(SimulatedStudy::paper())
}

fn run(study: SimulatedStudy) -> SimulatedReport {
    study
        .run(
            &cluster("h200-8x-nvlink.toml"),
            &cluster("h200-4x8-infiniband-ndr.toml"),
        )
        .unwrap_or_else(|error| panic!("{error}"))
}

#[test]
#[ignore = "prints the simulated cluster report; run with --ignored --nocapture"]
fn print_simulated_cluster_report() {
    println!("{}", report());
    println!("{}", run(SimulatedStudy::paper_one_sequence_per_step()));
}

#[test]
fn simulated_report_is_consistent() {
    let report = report();
    assert_eq!(report.rows.len(), 3 * 5);
    for row in &report.rows {
        if let Some(best) = &row.best {
            assert_eq!(
                best.layout.pp * best.layout.cp * best.layout.dp,
                row.devices,
                "{row:?}"
            );
            assert!(
                best.predicted.peak_bytes_per_device <= row.memory_limit_bytes,
                "{row:?}"
            );
            assert_eq!(row.sequences_per_step, (1 << 21) / row.seq_len);
        }
        for layout in &row.out_of_memory_layouts {
            assert!(layout.smallest_excess_bytes > 0);
            assert_eq!(layout.pp * layout.cp * layout.dp, row.devices);
        }
    }
    // At S = 256K one sequence's distance index is 68.7 GB at cp = 1: a pipeline of two or more
    // stages holds two sequences' rows on stage 0 (with enough micro-batches) or a micro-batch of
    // two or more sequences, which cannot fit in 134 GB; with cp = 1 on 8 devices every pp >= 2
    // layout must be out of memory.
    let row = report
        .rows
        .iter()
        .find(|r| r.seq_len == 262_144 && r.devices == 8)
        .expect("row for 256K on 8 devices");
    for pp in [2, 4, 8] {
        let dp = 8 / pp;
        assert!(
            row.out_of_memory_layouts
                .iter()
                .any(|l| (l.pp, l.cp, l.dp) == (pp, 1, dp)),
            "pp = {pp}, cp = 1 should not fit: {:?}",
            row.out_of_memory_layouts
        );
    }
    // More devices never make the best plan of the same sequence length slower within one node.
    for seq_len in [16_384, 65_536, 262_144] {
        let times: Vec<f64> = report
            .rows
            .iter()
            .filter(|r| r.seq_len == seq_len && r.devices <= 8)
            .filter_map(|r| r.best.as_ref().map(|b| b.predicted.step_seconds))
            .collect();
        for pair in times.windows(2) {
            assert!(pair[1] <= pair[0], "S = {seq_len}: {times:?}");
        }
    }
}

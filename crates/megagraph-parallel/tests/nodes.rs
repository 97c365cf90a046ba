//! Multi-node training with two processes on loopback: an orchestrator process and two node
//! processes (this test binary, started again to run the ignored test `node_process`).
//!
//! - two nodes of a `pp x cp x dp` mesh train like one process with `2 * dp` replicas (and like
//!   the single device);
//! - a node that panics or exits stops the other within seconds, with an error naming the
//!   node and rank.
//!
//! Every child is killed when a test ends or fails, and every wait has a deadline. The tests of
//! this process take turns ([`turn`]): two of them seeding Burn's one random state and
//! initializing a model at once would give each other different parameters.

mod common;
#[path = "../../../tests/support/turn.rs"]
mod turn;

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{B, Synthetic, model, optimizer, parameters, relative, single_device, steps};
use megagraph_parallel::{
    InjectedFault, NodeConfig, ParallelConfig, ParallelError, ParallelTrainer, TrainerOptions,
    run_orchestrator,
};
use serde::{Deserialize, Serialize};
use turn::turn;

const LAYERS: usize = 4;
const SEQ_LEN: usize = 16;
const SEQUENCES: usize = 36;
const PER_STEP: usize = 12;
const LR: f64 = 1e-2;
/// The peer timeout of the nodes: a lost node must be noticed well before it.
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the parent waits for its children.
const DEADLINE: Duration = Duration::from_secs(240);

/// Environment of a child: its role (`orchestrator` or `node`).
const ROLE: &str = "MEGAGRAPH_TEST_ROLE";
/// Environment of a child: the orchestrator's port, or the node's [`NodeSpec`] as JSON.
const SPEC: &str = "MEGAGRAPH_TEST_SPEC";
/// Environment of a node child: where it writes its [`NodeOutcome`] as JSON.
const OUT: &str = "MEGAGRAPH_TEST_OUT";

/// How a node child fails on purpose.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Fault {
    /// Its rank 0 panics in the forward pass of this step.
    Panic(u64),
    /// The process exits (code 3) before this step.
    Exit(u64),
    /// The process stops taking part before this step but stays alive.
    Stall(u64),
    /// The node is never started.
    Absent,
}

/// What a node child runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct NodeSpec {
    nodes: NodeConfig,
    mesh: ParallelConfig,
    fault: Option<Fault>,
    /// The peer timeout, in seconds.
    timeout: u64,
}

/// What a node child reports.
#[derive(Debug, Default, Serialize, Deserialize)]
struct NodeOutcome {
    losses: Vec<f64>,
    parameters: Vec<(String, Vec<f32>)>,
    /// The error of the failing call, with its rank and how long that call took.
    error: Option<String>,
    lost: bool,
    panicked: bool,
    error_rank: Option<usize>,
    failed_after: f64,
}

/// The body of a child process; skipped when run without the environment of one.
#[test]
#[ignore = "a child process of the multi-node tests, started by them"]
fn node_process() {
    let (Ok(role), Ok(spec)) = (std::env::var(ROLE), std::env::var(SPEC)) else {
        println!("node_process: not started by a multi-node test, nothing to do");
        return;
    };
    if role == "orchestrator" {
        let port: u16 = spec.parse().unwrap_or_else(|e| panic!("port {spec}: {e}"));
        run_orchestrator(port).unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    let spec: NodeSpec = serde_json::from_str(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let out = PathBuf::from(std::env::var(OUT).unwrap_or_else(|e| panic!("{OUT}: {e}")));
    let mut options = TrainerOptions::new(SEQ_LEN, PER_STEP)
        .with_optimizer(optimizer())
        .with_timeout(Duration::from_secs(spec.timeout))
        .with_nodes(spec.nodes.clone());
    if let Some(Fault::Panic(step)) = spec.fault {
        options = options.with_fault(InjectedFault { rank: 0, step });
    }
    let mut outcome = NodeOutcome::default();
    let started = Instant::now();
    let trainer = ParallelTrainer::<B>::new(
        spec.mesh.clone(),
        model(LAYERS, 7),
        Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared(),
        options,
        vec![Default::default()],
    );
    let result = trainer.and_then(|mut trainer| {
        for (step, sequences) in steps().iter().enumerate() {
            match spec.fault {
                Some(Fault::Exit(at)) if at == step as u64 => {
                    eprintln!(
                        "node {}: exiting before step {step} (test)",
                        spec.nodes.node_rank
                    );
                    std::process::exit(3);
                }
                Some(Fault::Stall(at)) if at == step as u64 => {
                    eprintln!(
                        "node {}: stalling before step {step} (test)",
                        spec.nodes.node_rank
                    );
                    loop {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                _ => {}
            }
            let started = Instant::now();
            match trainer.step(sequences, LR) {
                Ok(output) => outcome.losses.push(output.loss),
                Err(error) => {
                    outcome.failed_after = started.elapsed().as_secs_f64();
                    return Err(error);
                }
            }
        }
        trainer.model()
    });
    match result {
        Ok(model) => outcome.parameters = parameters(&model),
        Err(error) => {
            if outcome.failed_after == 0.0 {
                outcome.failed_after = started.elapsed().as_secs_f64();
            }
            eprintln!("node {}: {error}", spec.nodes.node_rank);
            outcome.lost = matches!(error, ParallelError::NodeLost { .. });
            outcome.panicked = matches!(error, ParallelError::WorkerPanicked { .. });
            outcome.error_rank = error.rank();
            outcome.error = Some(error.to_string());
        }
    }
    let json = serde_json::to_string(&outcome).unwrap_or_else(|e| panic!("{e}"));
    let partial = out.with_extension("partial");
    std::fs::write(&partial, json).unwrap_or_else(|e| panic!("{}: {e}", partial.display()));
    std::fs::rename(&partial, &out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Child processes, killed when dropped (so a failing test leaves none behind).
struct Children {
    dir: tempfile::TempDir,
    children: Vec<(String, Child)>,
}

impl Children {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")),
            children: Vec::new(),
        }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.json"))
    }

    /// Starts this test binary's `node_process` as `name` with `role` and `spec`.
    fn spawn(&mut self, name: &str, role: &str, spec: String) {
        let log = File::create(self.log(name)).unwrap_or_else(|e| panic!("{e}"));
        let log2 = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(exe)
            .args(["node_process", "--exact", "--ignored", "--nocapture"])
            .env(ROLE, role)
            .env(SPEC, spec)
            .env(OUT, self.out(name))
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    /// The logs of every child, for failure messages.
    fn logs(&self) -> String {
        let mut text = String::new();
        for (name, _) in &self.children {
            let log = std::fs::read_to_string(self.log(name)).unwrap_or_default();
            // keep the end: burn-collective's connection messages come first
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            text += &format!("--- {name} (last lines) ---\n");
            for line in tail.iter().rev() {
                text += line;
                text += "\n";
            }
        }
        text
    }

    /// Waits until every child named in `names` has exited; panics (killing all) past the
    /// deadline. Returns their exit codes.
    fn wait(&mut self, names: &[&str], deadline: Instant) -> Vec<Option<i32>> {
        let mut codes = vec![None; names.len()];
        let mut done = vec![false; names.len()];
        while done.iter().any(|d| !d) {
            for (i, name) in names.iter().enumerate() {
                if done[i] {
                    continue;
                }
                let (_, child) = self
                    .children
                    .iter_mut()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no child {name}"));
                if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("{e}")) {
                    codes[i] = status.code();
                    done[i] = true;
                }
            }
            if Instant::now() > deadline {
                panic!("children still running after the deadline\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        codes
    }

    fn outcome(&self, name: &str) -> NodeOutcome {
        let path = self.out(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), self.logs()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until something listens on `port` on loopback.
fn wait_for_port(port: u16, children: &Children, deadline: Instant) {
    let address = ([127, 0, 0, 1], port).into();
    while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            panic!(
                "the orchestrator did not listen on {port}\n{}",
                children.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts an orchestrator and two nodes running `mesh` each, node `n` with `faults[n]` and the
/// peer timeout `timeout`; waits for the nodes that end by themselves and returns the outcomes
/// of those that write one (default outcomes for the others).
fn run_two_nodes(
    mesh: &ParallelConfig,
    faults: [Option<Fault>; 2],
    timeout: Duration,
) -> (Vec<NodeOutcome>, Vec<Option<i32>>) {
    let deadline = Instant::now() + DEADLINE;
    let mut children = Children::new();
    let port = free_port();
    children.spawn("orchestrator", "orchestrator", port.to_string());
    wait_for_port(port, &children, deadline);
    for (node, fault) in faults.iter().enumerate() {
        if matches!(fault, Some(Fault::Absent)) {
            continue;
        }
        let data = free_port();
        let nodes = NodeConfig::new(
            2,
            node,
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{data}"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = NodeSpec {
            nodes,
            mesh: mesh.clone(),
            fault: *fault,
            timeout: timeout.as_secs(),
        };
        let spec = serde_json::to_string(&spec).unwrap_or_else(|e| panic!("{e}"));
        children.spawn(&format!("node{node}"), "node", spec);
    }
    let ends = |fault: &Option<Fault>| !matches!(fault, Some(Fault::Stall(_) | Fault::Absent));
    let waited: Vec<String> = (0..2)
        .filter(|&node| ends(&faults[node]))
        .map(|node| format!("node{node}"))
        .collect();
    let waited: Vec<&str> = waited.iter().map(String::as_str).collect();
    let mut codes = vec![None, None];
    for (name, code) in waited.iter().zip(children.wait(&waited, deadline)) {
        codes[usize::from(*name == "node1")] = code;
    }
    let outcomes = (0..2)
        .map(|node| match faults[node] {
            None | Some(Fault::Panic(_)) => children.outcome(&format!("node{node}")),
            Some(_) => NodeOutcome::default(),
        })
        .collect();
    println!("{}", children.logs());
    (outcomes, codes)
}

/// The same run in this process with `dp = 2 * mesh.dp`: losses and parameters.
fn one_process(mesh: &ParallelConfig) -> (Vec<f64>, Vec<(String, Vec<f32>)>) {
    let mut global = mesh.clone();
    global.dp *= 2;
    let options = TrainerOptions::new(SEQ_LEN, PER_STEP)
        .with_optimizer(optimizer())
        .with_timeout(TIMEOUT);
    let mut trainer = ParallelTrainer::<B>::new(
        global.clone(),
        model(LAYERS, 7),
        Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared(),
        options,
        vec![Default::default()],
    )
    .unwrap_or_else(|e| panic!("{global:?}: {e}"));
    let losses = steps()
        .iter()
        .map(|sequences| {
            trainer
                .step(sequences, LR)
                .unwrap_or_else(|e| panic!("{global:?}: {e}"))
                .loss
        })
        .collect();
    let trained = trainer.model().unwrap_or_else(|e| panic!("{e}"));
    (losses, parameters(&trained))
}

/// The largest relative difference over parameters given as host vectors.
fn max_difference(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> (f64, String) {
    assert_eq!(a.len(), b.len(), "different parameter counts");
    a.iter()
        .zip(b)
        .map(|((name, x), (other, y))| {
            assert_eq!(name, other, "parameters in different orders");
            (relative(x, y), name.clone())
        })
        .fold(
            (0.0, String::new()),
            |acc, cur| if cur.0 > acc.0 { cur } else { acc },
        )
}

fn check_two_nodes(mesh: ParallelConfig) {
    let (outcomes, codes) = run_two_nodes(&mesh, [None, None], TIMEOUT);
    let (losses, reference) = one_process(&mesh);
    let (device_losses, device_model) = single_device(
        model(LAYERS, 7),
        &Synthetic::new(SEQUENCES, SEQ_LEN, 11),
        &steps(),
        LR,
        &optimizer(),
    );
    // the in-process run is itself the single-device run (tests/integration/equivalence.rs)
    let (diff, name) = max_difference(&reference, &parameters(&device_model));
    assert!(
        diff <= 1e-4,
        "one process vs single device: {name} {diff:e}"
    );
    for (node, outcome) in outcomes.iter().enumerate() {
        assert_eq!(
            outcome.error, None,
            "node {node} failed (exit {:?})",
            codes[node]
        );
        assert_eq!(outcome.losses.len(), steps().len());
        for (step, (&got, &expected)) in outcome.losses.iter().zip(&losses).enumerate() {
            let rel = (got - expected).abs() / expected.abs();
            let device = (got - device_losses[step]).abs() / device_losses[step].abs();
            println!("{mesh:?} node {node} step {step}: loss {got} vs {expected} (rel {rel:e})");
            assert!(
                rel <= 1e-5 && device <= 1e-5,
                "{mesh:?} node {node} step {step}: loss {got}, one process {expected}, single device {}",
                device_losses[step]
            );
        }
        let (diff, name) = max_difference(&outcome.parameters, &reference);
        println!("{mesh:?} node {node}: max parameter difference {diff:e} ({name})");
        assert!(
            diff <= 1e-4,
            "{mesh:?} node {node}: {name} differs by {diff:e}"
        );
        let (moved, _) = max_difference(&outcome.parameters, &parameters(&model(LAYERS, 7)));
        assert!(
            moved > 1e-3,
            "{mesh:?} node {node}: parameters did not move ({moved:e})"
        );
    }
    assert_eq!(codes, vec![Some(0), Some(0)]);
}

#[test]
fn two_data_parallel_nodes_train_like_one_process() {
    let _turn = turn();
    // 2 replicas per node: 4 over the run
    check_two_nodes(ParallelConfig::uniform(1, 1, 2, 1, LAYERS).unwrap_or_else(|e| panic!("{e}")));
}

#[test]
fn two_pipeline_and_context_parallel_nodes_train_like_one_process() {
    let _turn = turn();
    // every node runs 2 stages x 2 context ranks, 2 micro-batches; 2 replicas over the run
    check_two_nodes(ParallelConfig::uniform(2, 2, 1, 2, LAYERS).unwrap_or_else(|e| panic!("{e}")));
}

/// Node 1 fails at step 1; node 0 must report the lost node quickly.
fn check_lost_node(fault: Fault) {
    let mesh = ParallelConfig::uniform(1, 1, 2, 1, LAYERS).unwrap_or_else(|e| panic!("{e}"));
    let (outcomes, codes) = run_two_nodes(&mesh, [None, Some(fault)], TIMEOUT);
    let survivor = &outcomes[0];
    println!(
        "{fault:?}: node 0: {:?} after {:.2} s",
        survivor.error, survivor.failed_after
    );
    assert_eq!(survivor.losses.len(), 1, "node 0 should finish step 0 only");
    let error = survivor.error.as_deref().unwrap_or("no error");
    assert!(survivor.lost, "node 0: {error}");
    assert!(error.contains("node 0"), "{error}");
    assert!(survivor.error_rank.is_some(), "{error}");
    assert!(
        survivor.failed_after < TIMEOUT.as_secs_f64() / 3.0,
        "node 0 took {:.1} s to notice",
        survivor.failed_after
    );
    match fault {
        Fault::Panic(_) => {
            let failed = &outcomes[1];
            let error = failed.error.as_deref().unwrap_or("no error");
            assert!(failed.panicked && error.contains("injected"), "{error}");
            assert_eq!(failed.error_rank, Some(0));
        }
        Fault::Exit(_) => assert_eq!(codes[1], Some(3)),
        _ => unreachable!("not a lost-node fault"),
    }
}

#[test]
fn a_panicking_node_stops_the_other() {
    let _turn = turn();
    check_lost_node(Fault::Panic(1));
}

#[test]
fn an_exiting_node_stops_the_other() {
    let _turn = turn();
    check_lost_node(Fault::Exit(1));
}

#[test]
fn a_stalled_node_is_noticed_after_the_timeout() {
    let _turn = turn();
    // node 1 stays alive but stops at step 1: node 0's all-reduce would wait forever
    let mesh = ParallelConfig::uniform(1, 1, 2, 1, LAYERS).unwrap_or_else(|e| panic!("{e}"));
    let timeout = Duration::from_secs(3);
    let (outcomes, _) = run_two_nodes(&mesh, [None, Some(Fault::Stall(1))], timeout);
    let survivor = &outcomes[0];
    let error = survivor.error.as_deref().unwrap_or("no error");
    println!(
        "stall: node 0: {error} after {:.2} s",
        survivor.failed_after
    );
    assert_eq!(survivor.losses.len(), 1, "node 0 should finish step 0 only");
    assert!(
        error.contains("waited") && error.contains("all-reduce of step 1"),
        "{error}"
    );
    assert!(survivor.failed_after >= timeout.as_secs_f64(), "{error}");
}

#[test]
fn a_missing_node_is_noticed_at_registration() {
    let _turn = turn();
    let mesh = ParallelConfig::uniform(1, 1, 1, 1, LAYERS).unwrap_or_else(|e| panic!("{e}"));
    let timeout = Duration::from_secs(3);
    let (outcomes, _) = run_two_nodes(&mesh, [None, Some(Fault::Absent)], timeout);
    let survivor = &outcomes[0];
    let error = survivor.error.as_deref().unwrap_or("no error");
    println!("absent: node 0: {error}");
    assert!(survivor.losses.is_empty());
    assert!(
        error.contains("waited") && error.contains("register with the orchestrator"),
        "{error}"
    );
}

#[test]
fn refuses_a_bad_node_setup_before_starting() {
    let _turn = turn();
    let mesh = ParallelConfig::uniform(1, 1, 2, 1, LAYERS).unwrap_or_else(|e| panic!("{e}"));
    let start = |nodes: NodeConfig, per_step: usize| {
        ParallelTrainer::<B>::new(
            mesh.clone(),
            model(LAYERS, 7),
            Synthetic::new(SEQUENCES, SEQ_LEN, 11).shared(),
            TrainerOptions::new(SEQ_LEN, per_step).with_nodes(nodes),
            vec![Default::default()],
        )
        .err()
    };
    let nodes =
        NodeConfig::new(3, 0, "127.0.0.1:1", "127.0.0.1:2").unwrap_or_else(|e| panic!("{e}"));
    // 3 nodes x 2 replicas do not divide 8 sequences per step
    let error = start(nodes.clone(), 8);
    assert!(
        matches!(
            &error,
            Some(ParallelError::Config(
                megagraph_parallel::ParallelConfigError::DataDoesNotDivideSequences { dp: 6, .. }
            ))
        ),
        "{error:?}"
    );
    let mut bad = nodes.clone();
    bad.node_rank = 3;
    let error = start(bad, 12);
    assert!(matches!(error, Some(ParallelError::Nodes(_))), "{error:?}");
    let taken = TcpListener::bind("0.0.0.0:0").unwrap_or_else(|e| panic!("{e}"));
    let port = taken.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let error = start(nodes.with_data_port(port), 12);
    assert!(
        matches!(
            error,
            Some(ParallelError::Nodes(
                megagraph_parallel::NodeError::PortUnavailable { .. }
            ))
        ),
        "{error:?}"
    );
}

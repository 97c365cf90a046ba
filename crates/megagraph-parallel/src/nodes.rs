//! Several processes (machines) training one model: data parallelism across nodes through
//! burn-collective's global mode.
//!
//! Every node (process) runs the same `pp x cp x dp` mesh of [`ParallelConfig`]; data
//! parallelism spans the nodes, so the run has `num_nodes * dp` replicas. A step's sequences
//! are sharded over all of them ([`shard_sequences`] with `num_nodes * dp` replicas) and node
//! `n` runs replicas `n * dp .. (n + 1) * dp`; every node must therefore be given the SAME
//! sequences for every step (same data, same seed). The loss normalizer is the whole step's
//! training-node count, the gradients of every stage are summed over all ranks holding it on
//! every node (burn-collective: a local all-reduce inside each process, then a ring all-reduce
//! between the nodes), and so is the loss: a step returns the loss and parameters of one
//! process with `dp = num_nodes * dp`, up to float rounding.
//!
//! The nodes meet at an orchestrator ([`run_orchestrator`], `megagraph orchestrator --port P`)
//! that tells each node the others' addresses; tensors then travel directly between the nodes'
//! data services (websockets on [`NodeConfig::data_port`]). Start one orchestrator per run:
//! it keeps the nodes of a run registered until they finish, and it is not reset after a node
//! fails.
//!
//! Failures: a node whose process ends (an error, a panic, a kill) breaks the others'
//! all-reduce within a moment ([`ParallelError::NodeLost`](crate::ParallelError::NodeLost));
//! a node that stays alive without taking part is noticed after
//! [`TrainerOptions::timeout`](crate::TrainerOptions) (burn-collective's global mode has no
//! timeout of its own; every wait on it is guarded here). After a multi-node failure the
//! process's collective cannot be used again: end the process.
//!
//! Launching two nodes (the README's "Several machines" has the commands):
//!
//! ```no_run
//! use megagraph_parallel::{NodeConfig, TrainerOptions};
//!
//! // first, once per run, on a machine both nodes reach: `megagraph orchestrator --port 4000`
//! // (or `megagraph_parallel::run_orchestrator(4000)` in a process of its own)
//! // node 0, on 10.0.0.1; node 1 runs the same with (2, 1, "10.0.0.1:4000", "10.0.0.2:4001")
//! let nodes = NodeConfig::new(2, 0, "10.0.0.1:4000", "10.0.0.1:4001")?;
//! let options = TrainerOptions::new(256, 8).with_nodes(nodes);
//! // ParallelTrainer::new(config, model, source, options, devices)?, then the same steps on
//! // every node
//! # Ok::<(), megagraph_parallel::NodeError>(())
//! ```
//!
//! [`ParallelConfig`]: crate::ParallelConfig
//! [`shard_sequences`]: crate::shard_sequences

use std::net::TcpListener;
use std::str::FromStr;

use burn::collective::{CollectiveConfig, PeerId};
use burn_communication::Address;
use serde::{Deserialize, Serialize};

/// This process's place among the nodes of a multi-node run.
///
/// Build it with [`NodeConfig::new`] (which checks it) and give it to the trainer with
/// [`TrainerOptions::with_nodes`](crate::TrainerOptions::with_nodes). With `num_nodes = 1` the
/// trainer runs alone and never contacts the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeConfig {
    /// How many nodes (processes) take part, at least 1; the same on every node.
    pub num_nodes: usize,
    /// This node's index, `0 .. num_nodes`; node `n` runs data-parallel replicas
    /// `n * dp .. (n + 1) * dp`.
    pub node_rank: usize,
    /// The orchestrator's address as `host:port` (or `ws://host:port`).
    pub orchestrator: String,
    /// The address at which the OTHER nodes reach this node's data service, as `host:port`
    /// (or `ws://host:port`): a routable address of this machine, not `0.0.0.0`.
    pub node_address: String,
    /// The port this node's data service listens on (all interfaces); normally the port of
    /// `node_address` (differs only behind a port forward).
    pub data_port: u16,
}

/// Why a [`NodeConfig`] is refused or the orchestrator cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// `num_nodes` is 0.
    #[error("num_nodes is 0: a run has at least 1 node")]
    ZeroNodes,
    /// `node_rank` is not below `num_nodes`.
    #[error("node_rank = {node_rank} but num_nodes = {num_nodes}: node ranks are 0..{num_nodes}")]
    RankOutOfRange {
        /// The given node rank.
        node_rank: usize,
        /// The number of nodes.
        num_nodes: usize,
    },
    /// An address is not `host:port` or `ws://host:port`.
    #[error("{field} = {value:?}: {reason} (expected host:port or ws://host:port)")]
    Address {
        /// `orchestrator` or `node_address`.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A port is 0.
    #[error("{field} is 0: give the port to listen on")]
    ZeroPort {
        /// `data_port` or `port`.
        field: &'static str,
    },
    /// A port this process must listen on is taken (or not allowed).
    #[error("cannot listen on port {port} for the {service}: {message}")]
    PortUnavailable {
        /// `orchestrator` or `data service`.
        service: &'static str,
        /// The port.
        port: u16,
        /// The operating system's error.
        message: String,
    },
    /// The orchestrator's runtime could not start.
    #[error("cannot start the orchestrator's runtime: {message}")]
    Runtime {
        /// The error.
        message: String,
    },
}

impl NodeConfig {
    /// Node `node_rank` of `num_nodes`, meeting the others at `orchestrator` and reached by them
    /// at `node_address`; the data service listens on `node_address`'s port (change it with
    /// [`with_data_port`](Self::with_data_port)).
    ///
    /// # Errors
    ///
    /// The first failing check of [`validate`](Self::validate), or [`NodeError::Address`] when
    /// `node_address` has no port.
    pub fn new(
        num_nodes: usize,
        node_rank: usize,
        orchestrator: &str,
        node_address: &str,
    ) -> Result<Self, NodeError> {
        let (_, data_port) = parse_address("node_address", node_address)?;
        let config = Self {
            num_nodes,
            node_rank,
            orchestrator: orchestrator.to_string(),
            node_address: node_address.to_string(),
            data_port,
        };
        config.validate()?;
        Ok(config)
    }

    /// Sets the port the data service listens on.
    pub fn with_data_port(mut self, data_port: u16) -> Self {
        self.data_port = data_port;
        self
    }

    /// Checks, in order: `num_nodes >= 1`, `node_rank < num_nodes`, both addresses
    /// `host:port` with a non-zero port (an optional `ws://` prefix), `data_port != 0`.
    ///
    /// # Errors
    ///
    /// The first failure.
    pub fn validate(&self) -> Result<(), NodeError> {
        if self.num_nodes == 0 {
            return Err(NodeError::ZeroNodes);
        }
        if self.node_rank >= self.num_nodes {
            return Err(NodeError::RankOutOfRange {
                node_rank: self.node_rank,
                num_nodes: self.num_nodes,
            });
        }
        parse_address("orchestrator", &self.orchestrator)?;
        parse_address("node_address", &self.node_address)?;
        if self.data_port == 0 {
            return Err(NodeError::ZeroPort { field: "data_port" });
        }
        Ok(())
    }

    /// Whether more than one node takes part (otherwise the trainer runs alone).
    pub fn is_multi_node(&self) -> bool {
        self.num_nodes > 1
    }

    /// The data-parallel degree of the whole run for `dp` replicas per node.
    pub fn global_dp(&self, dp: usize) -> usize {
        self.num_nodes * dp
    }

    /// The collective configuration of a node with `world` local ranks: burn-collective's
    /// global mode with its default strategies (a tree inside the process, a ring between the
    /// nodes).
    pub(crate) fn collective_config(&self, world: usize) -> Result<CollectiveConfig, NodeError> {
        let orchestrator = websocket_address("orchestrator", &self.orchestrator)?;
        let node_address = websocket_address("node_address", &self.node_address)?;
        let num_nodes = u32::try_from(self.num_nodes).map_err(|_| NodeError::Address {
            field: "num_nodes",
            value: self.num_nodes.to_string(),
            reason: "too many nodes",
        })?;
        Ok(CollectiveConfig::default()
            .with_num_devices(world)
            .with_num_nodes(num_nodes)
            .with_global_address(orchestrator)
            .with_node_address(node_address)
            .with_data_service_port(self.data_port))
    }

    /// The collective's id of local rank `rank` of a `world`-rank mesh: unique over all nodes.
    pub(crate) fn peer_id(&self, rank: usize, world: usize) -> PeerId {
        PeerId::from(self.node_rank * world + rank)
    }

    /// Fails when the data port cannot be listened on now (taken by another process): checked
    /// before the collective starts, whose own server would only log the failure.
    pub(crate) fn check_data_port(&self) -> Result<(), NodeError> {
        check_port("data service", self.data_port)
    }
}

/// Splits `host:port` or `ws://host:port` into host and port.
fn parse_address<'a>(field: &'static str, value: &'a str) -> Result<(&'a str, u16), NodeError> {
    let error = |reason| NodeError::Address {
        field,
        value: value.to_string(),
        reason,
    };
    let rest = value.strip_prefix("ws://").unwrap_or(value);
    if rest.contains("://") {
        return Err(error("only ws:// addresses are supported"));
    }
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| error("no port"))?;
    if host.is_empty() {
        return Err(error("no host"));
    }
    if host.contains('/') {
        return Err(error("a path is not allowed"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| error("the port is not a number 1..65535"))?;
    if port == 0 {
        return Err(error("port 0"));
    }
    Ok((host, port))
}

/// The `ws://host:port` form of an address that burn-collective connects to (it refuses a
/// bare `host:port`).
fn websocket_address(field: &'static str, value: &str) -> Result<Address, NodeError> {
    let (host, port) = parse_address(field, value)?;
    Address::from_str(&format!("ws://{host}:{port}")).map_err(|_| NodeError::Address {
        field,
        value: value.to_string(),
        reason: "not a valid address",
    })
}

/// Fails when `port` cannot be listened on, on all interfaces, right now.
fn check_port(service: &'static str, port: u16) -> Result<(), NodeError> {
    TcpListener::bind(("0.0.0.0", port))
        .map(drop)
        .map_err(|err| NodeError::PortUnavailable {
            service,
            port,
            message: err.to_string(),
        })
}

/// burn-collective's orchestrator, ready to run on a port: [`Orchestrator::new`] checks the
/// port and builds the runtime, [`Orchestrator::run`] serves until Ctrl-C or SIGTERM.
/// [`run_orchestrator`] does both.
#[derive(Debug)]
pub struct Orchestrator {
    port: u16,
    runtime: tokio::runtime::Runtime,
}

impl Orchestrator {
    /// An orchestrator for `port` (all interfaces).
    ///
    /// # Errors
    ///
    /// [`NodeError::ZeroPort`], [`NodeError::PortUnavailable`] when the port is taken, or
    /// [`NodeError::Runtime`].
    pub fn new(port: u16) -> Result<Self, NodeError> {
        if port == 0 {
            return Err(NodeError::ZeroPort { field: "port" });
        }
        check_port("orchestrator", port)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("megagraph-orchestrator")
            .build()
            .map_err(|err| NodeError::Runtime {
                message: err.to_string(),
            })?;
        Ok(Self { port, runtime })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serves the nodes until the process gets Ctrl-C or SIGTERM (burn-collective installs
    /// handlers for both: in this process they stop the orchestrator, which then returns).
    /// Blocks the calling thread; run it in its own process (`megagraph orchestrator --port
    /// P`) or thread. Use a fresh orchestrator for each run.
    pub fn run(self) {
        log::info!("orchestrator listening on 0.0.0.0:{}", self.port);
        self.runtime
            .block_on(burn_collective::start_global_orchestrator(self.port));
        log::info!("orchestrator on port {} stopped", self.port);
    }
}

/// Runs burn-collective's orchestrator on `port` (all interfaces) until the process gets
/// Ctrl-C or SIGTERM: [`Orchestrator::new`] then [`Orchestrator::run`]. Nodes connect to it as
/// `host:port` (retrying every second until it is up).
///
/// # Errors
///
/// As [`Orchestrator::new`].
pub fn run_orchestrator(port: u16) -> Result<(), NodeError> {
    Orchestrator::new(port)?.run();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_takes_the_data_port_from_the_node_address() {
        let config = NodeConfig::new(2, 1, "10.0.0.1:4000", "10.0.0.2:4001").unwrap();
        assert_eq!(config.data_port, 4001);
        assert!(config.is_multi_node());
        assert_eq!(config.global_dp(3), 6);
        assert_eq!(config.peer_id(2, 4), PeerId::from(6usize));
        let config = config.with_data_port(5000);
        assert_eq!(config.data_port, 5000);
        let single = NodeConfig::new(1, 0, "ws://localhost:4000", "ws://localhost:4001").unwrap();
        assert!(!single.is_multi_node());
    }

    #[test]
    fn collective_config_uses_websocket_urls() {
        let config = NodeConfig::new(2, 0, "127.0.0.1:4000", "ws://127.0.0.1:4001").unwrap();
        let collective = config.collective_config(3).unwrap();
        assert!(collective.is_valid());
        let text = collective.to_string();
        assert!(text.contains("ws://127.0.0.1:4000"), "{text}");
        assert!(text.contains("ws://127.0.0.1:4001"), "{text}");
        assert!(text.contains("num_devices: 3"), "{text}");
        assert!(text.contains("num_nodes: Some(2)"), "{text}");
    }

    #[test]
    fn refuses_each_bad_field() {
        assert_eq!(
            NodeConfig::new(0, 0, "a:1", "b:2"),
            Err(NodeError::ZeroNodes)
        );
        assert_eq!(
            NodeConfig::new(2, 2, "a:1", "b:2"),
            Err(NodeError::RankOutOfRange {
                node_rank: 2,
                num_nodes: 2
            })
        );
        for (value, reason) in [
            ("hostonly", "no port"),
            (":4000", "no host"),
            ("host:x", "the port is not a number 1..65535"),
            ("host:70000", "the port is not a number 1..65535"),
            ("host:0", "port 0"),
            ("http://host:1", "only ws:// addresses are supported"),
            ("host/path:1", "a path is not allowed"),
        ] {
            assert_eq!(
                NodeConfig::new(2, 0, value, "b:2"),
                Err(NodeError::Address {
                    field: "orchestrator",
                    value: value.to_string(),
                    reason
                }),
                "{value}"
            );
        }
        assert!(matches!(
            NodeConfig::new(2, 0, "a:1", "b"),
            Err(NodeError::Address {
                field: "node_address",
                ..
            })
        ));
        let config = NodeConfig::new(2, 0, "a:1", "b:2")
            .unwrap()
            .with_data_port(0);
        assert_eq!(
            config.validate(),
            Err(NodeError::ZeroPort { field: "data_port" })
        );
        let text = NodeError::RankOutOfRange {
            node_rank: 2,
            num_nodes: 2,
        }
        .to_string();
        assert!(text.contains("node_rank = 2"), "{text}");
    }

    #[test]
    fn a_taken_port_is_reported() {
        let taken = TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let config = NodeConfig::new(2, 0, "a:1", &format!("127.0.0.1:{port}")).unwrap();
        assert!(matches!(
            config.check_data_port(),
            Err(NodeError::PortUnavailable { port: p, service: "data service", .. }) if p == port
        ));
        assert!(matches!(
            run_orchestrator(port),
            Err(NodeError::PortUnavailable {
                service: "orchestrator",
                ..
            })
        ));
        assert_eq!(
            run_orchestrator(0),
            Err(NodeError::ZeroPort { field: "port" })
        );
    }
}

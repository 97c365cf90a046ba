//! Flags that make a training process one node of a multi-node run (data parallelism across
//! processes; see `megagraph_parallel::nodes`).

use clap::Args;
use megagraph_parallel::NodeConfig;

use super::error::Result;

/// Multi-node flags: `--nodes N --node-rank I --orchestrator HOST:PORT --node-address HOST:PORT
/// [--data-port P]`. Without `--nodes` (or with `--nodes 1`) the process trains alone.
#[derive(Debug, Args, Default)]
pub struct NodeArgs {
    /// Number of nodes (processes) of a multi-node run; every node runs the same mesh and data
    /// parallelism spans them (global dp = nodes x dp).
    #[arg(long, value_name = "N", requires_all = ["node_rank", "orchestrator", "node_address"])]
    pub nodes: Option<usize>,
    /// This node's index, 0..N (node 0 can also host the orchestrator).
    #[arg(long, value_name = "I", requires = "nodes")]
    pub node_rank: Option<usize>,
    /// Address of the orchestrator (`megagraph orchestrator --port P`), as HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", requires = "nodes")]
    pub orchestrator: Option<String>,
    /// Address at which the other nodes reach this one, as HOST:PORT (a routable address of
    /// this machine; its port is where this node's data service listens).
    #[arg(long, value_name = "HOST:PORT", requires = "nodes")]
    pub node_address: Option<String>,
    /// Port the data service listens on, when it differs from --node-address's (port forward).
    #[arg(long, value_name = "P", requires = "nodes")]
    pub data_port: Option<u16>,
}

impl NodeArgs {
    /// The node configuration these flags describe; `None` without `--nodes`.
    ///
    /// # Errors
    ///
    /// A [`NodeError`](megagraph_parallel::NodeError) naming the bad flag's value.
    pub fn to_node_config(&self) -> Result<Option<NodeConfig>> {
        let (Some(nodes), Some(rank), Some(orchestrator), Some(address)) = (
            self.nodes,
            self.node_rank,
            &self.orchestrator,
            &self.node_address,
        ) else {
            return Ok(None);
        };
        let mut config = NodeConfig::new(nodes, rank, orchestrator, address)?;
        if let Some(port) = self.data_port {
            config = config.with_data_port(port);
            config.validate()?;
        }
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use megagraph_parallel::NodeError;

    use super::*;
    use crate::cli::error::CliError;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        nodes: NodeArgs,
    }

    fn parse(args: &[&str]) -> std::result::Result<Flags, clap::Error> {
        Flags::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
    }

    /// The node flags of node `rank` of 2 with these addresses, then `extra` flags.
    fn node_of_two(rank: &str, orchestrator: &str, address: &str, extra: &[&str]) -> Flags {
        let flags = ["--nodes", "2", "--node-rank", rank, "--orchestrator", orchestrator, "--node-address", address];
        parse(&[&flags[..], extra].concat()).unwrap()
    }

    #[test]
    fn builds_the_node_config() {
        let flags = node_of_two("1", "10.0.0.1:4000", "10.0.0.2:4001", &[]);
        let config = flags.nodes.to_node_config().unwrap().unwrap();
        assert_eq!(config, NodeConfig::new(2, 1, "10.0.0.1:4000", "10.0.0.2:4001").unwrap());
        assert_eq!(config.data_port, 4001);
        let flags = node_of_two("0", "a:1", "b:2", &["--data-port", "5000"]);
        let config = flags.nodes.to_node_config().unwrap().unwrap();
        assert_eq!(config.data_port, 5000);
        assert_eq!(parse(&[]).unwrap().nodes.to_node_config().unwrap(), None);
    }

    #[test]
    fn refuses_incomplete_or_bad_flags() {
        assert!(parse(&["--nodes", "2"]).is_err());
        assert!(parse(&["--node-rank", "0"]).is_err());
        let error = node_of_two("2", "a:1", "b:2", &[]).nodes.to_node_config().unwrap_err();
        assert!(
            matches!(error, CliError::Nodes(NodeError::RankOutOfRange { node_rank: 2, num_nodes: 2 })),
            "{error}"
        );
        let error = node_of_two("0", "a", "b:2", &[]).nodes.to_node_config().unwrap_err().to_string();
        assert!(error.contains("orchestrator") && error.contains("no port"), "{error}");
    }
}

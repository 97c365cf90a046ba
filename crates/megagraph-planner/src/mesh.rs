//! [`CandidateMesh`]: a candidate `pp x cp x dp` layout with its micro-batch count (before its
//! layers are split into stages), and how its groups lie on a cluster's nodes.
//!
//! Ranks are laid out with context parallelism innermost (its ring moves K/V blocks every layer),
//! then data parallelism, then pipeline stages outermost:
//! `rank = (stage * dp + replica) * cp + block`. A group's messages use the inter-node link as soon
//! as one hop of its ring crosses nodes.

use crate::cluster::{ClusterSpec, LinkSpec};
use megagraph_layout::{CpMode, ParallelConfig};

/// Degrees, micro-batch count and context mode of a candidate plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CandidateMesh {
    /// Pipeline stages.
    pub pp: usize,
    /// Context-parallel blocks per sequence.
    pub cp: usize,
    /// Data-parallel replicas.
    pub dp: usize,
    /// Micro-batches per step and replica.
    pub micro_batches: usize,
    /// How each context group attends (only matters when `cp > 1`).
    pub cp_mode: CpMode,
}

/// The link a group's ring runs over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupLink {
    /// The slowest hop's link.
    pub link: LinkSpec,
    /// Whether some hop crosses nodes.
    pub inter_node: bool,
}

impl CandidateMesh {
    /// The mesh of `config` (its degrees, micro-batches and context mode).
    pub fn of(config: &ParallelConfig) -> Self {
        Self {
            pp: config.pp,
            cp: config.cp,
            dp: config.dp,
            micro_batches: config.micro_batches,
            cp_mode: config.cp_mode,
        }
    }

    /// The layout of this mesh with `stage_layers` layers per stage.
    pub fn layout(&self, stage_layers: Vec<usize>) -> ParallelConfig {
        ParallelConfig {
            pp: self.pp,
            cp: self.cp,
            dp: self.dp,
            micro_batches: self.micro_batches,
            stage_layers,
            cp_mode: self.cp_mode,
        }
    }

    /// Number of ranks: `pp * cp * dp`.
    pub fn world_size(&self) -> usize {
        self.pp * self.cp * self.dp
    }

    /// The rank of block `block` of replica `replica` on stage `stage`.
    pub fn rank(&self, stage: usize, replica: usize, block: usize) -> usize {
        (stage * self.dp + replica) * self.cp + block
    }

    /// The slowest hop of any context-parallel ring (the `cp` blocks of one replica and stage).
    pub fn context_link(&self, cluster: &ClusterSpec) -> GroupLink {
        let this = *self;
        Self::slowest(
            cluster,
            (0..this.pp).flat_map(move |s| {
                (0..this.dp)
                    .map(move |r| (0..this.cp).map(|b| this.rank(s, r, b)).collect::<Vec<_>>())
            }),
        )
    }

    /// The slowest hop between consecutive pipeline stages (same replica and block).
    pub fn pipeline_link(&self, cluster: &ClusterSpec) -> GroupLink {
        let mut worst = GroupLink {
            link: cluster.intra_node,
            inter_node: false,
        };
        for stage in 1..self.pp {
            for replica in 0..self.dp {
                for block in 0..self.cp {
                    let (link, inter) = cluster.link_between(
                        self.rank(stage - 1, replica, block),
                        self.rank(stage, replica, block),
                    );
                    if inter {
                        worst = GroupLink {
                            link,
                            inter_node: true,
                        };
                    }
                }
            }
        }
        worst
    }

    /// The slowest hop of any gradient all-reduce ring (the `dp * cp` ranks of one stage).
    pub fn gradient_link(&self, cluster: &ClusterSpec) -> GroupLink {
        let this = *self;
        Self::slowest(
            cluster,
            (0..this.pp).map(move |s| {
                (0..this.dp)
                    .flat_map(|r| (0..this.cp).map(move |b| this.rank(s, r, b)))
                    .collect::<Vec<_>>()
            }),
        )
    }

    /// The slowest hop over `rings` (each ring wraps around).
    fn slowest(cluster: &ClusterSpec, rings: impl Iterator<Item = Vec<usize>>) -> GroupLink {
        let mut worst = GroupLink {
            link: cluster.intra_node,
            inter_node: false,
        };
        for ring in rings {
            for (i, &rank) in ring.iter().enumerate() {
                let next = ring[(i + 1) % ring.len()];
                let (link, inter) = cluster.link_between(rank, next);
                if inter {
                    return GroupLink {
                        link,
                        inter_node: true,
                    };
                }
                worst.link = link;
            }
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(nodes: usize, per_node: usize) -> ClusterSpec {
        ClusterSpec {
            name: "test".into(),
            device: "gpu".into(),
            nodes,
            devices_per_node: per_node,
            memory_bytes_per_device: 1 << 30,
            intra_node: LinkSpec {
                bandwidth_bytes_per_second: 400e9,
                latency_seconds: 1e-6,
            },
            inter_node: Some(LinkSpec {
                bandwidth_bytes_per_second: 50e9,
                latency_seconds: 1e-5,
            }),
            compute: None,
            backward_waits_for_other_ranks: false,
        }
    }

    #[test]
    fn context_parallel_stays_inside_a_node_when_it_fits() {
        let cluster = cluster(4, 8);
        let mesh = CandidateMesh {
            pp: 4,
            cp: 8,
            dp: 1,
            micro_batches: 4,
            cp_mode: CpMode::Ring,
        };
        assert!(!mesh.context_link(&cluster).inter_node);
        assert!(mesh.pipeline_link(&cluster).inter_node);
        assert!(!mesh.gradient_link(&cluster).inter_node);
        let wide = CandidateMesh {
            pp: 1,
            cp: 16,
            dp: 2,
            micro_batches: 1,
            cp_mode: CpMode::Ring,
        };
        assert!(wide.context_link(&cluster).inter_node);
        assert_eq!(
            wide.context_link(&cluster).link.bandwidth_bytes_per_second,
            50e9
        );
        let mixed = CandidateMesh {
            pp: 2,
            cp: 4,
            dp: 4,
            micro_batches: 2,
            cp_mode: CpMode::Ring,
        };
        // dp x cp = 16 ranks of a stage span two nodes.
        assert!(mixed.gradient_link(&cluster).inter_node);
        assert!(!mixed.context_link(&cluster).inter_node);
        assert_eq!(mixed.rank(1, 2, 3), (4 + 2) * 4 + 3);
    }
}

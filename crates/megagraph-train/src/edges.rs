//! The data path of TorchGT's sparse attention: cluster-aware reordering of the sequences and
//! the edge lists each batch's sparse steps attend over.

use std::collections::BTreeSet;

use burn::tensor::backend::Backend;
use megagraph_graph::sequence::{BlockReform, cluster_parts, reform_edges};
use megagraph_kernels::{SequenceEdges, join_global_token};
use rayon::prelude::*;

use crate::attention::AttentionConfig;
use crate::data::SequenceDataset;
use crate::error::{Result, TrainError};

impl SequenceDataset {
    /// TorchGT's cluster-aware reordering of every sequence: its induced subgraph is cut into
    /// `clusters` parts by the locality partitioner and its members renumbered so that each
    /// part is contiguous ([`cluster_parts`]). The order is a pure function of the sequence
    /// and `seed`, so reordering each sequence once here gives every batch the order a
    /// per-batch reordering would; the distance rows and the edges of later batches follow it.
    /// The cluster sizes are kept for [`sequence_edges`](Self::sequence_edges)' reformation.
    ///
    /// Call it before the first batch (prefetched rows of the old order would be stale).
    ///
    /// # Errors
    ///
    /// A graph error from the partitioner (a sequence naming a node the graph lacks).
    pub fn reorder_clusters(&mut self, clusters: usize, seed: u64) -> Result<()> {
        let graph = &self.dataset.graph;
        let parts: Vec<Vec<Vec<u32>>> = self
            .sequences
            .par_iter()
            .enumerate()
            .map(|(index, members)| cluster_parts(graph, members, clusters, seed ^ index as u64))
            .collect::<Result<_, _>>()?;
        self.cluster_sizes = Some(
            parts
                .iter()
                .map(|parts| parts.iter().map(Vec::len).collect())
                .collect(),
        );
        self.sequences = parts.into_iter().map(|parts| parts.concat()).collect();
        Ok(())
    }

    /// The cluster sizes of each sequence after [`reorder_clusters`](Self::reorder_clusters).
    pub fn cluster_sizes(&self) -> Option<&[Vec<usize>]> {
        self.cluster_sizes.as_deref()
    }

    /// Checks that these sequences give `attention` what it reads: reformation
    /// (`block_reform`) needs the sequences reordered into clusters. The command line's loop and
    /// [`MegaGraphTrainer::check`](crate::MegaGraphTrainer::check) both run it before training.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming `attention.block_reform` when it is set and the
    /// sequences were not reordered.
    pub fn check_attention(&self, attention: &AttentionConfig) -> Result<()> {
        if attention.block_reform && self.cluster_sizes.is_none() {
            return Err(TrainError::InvalidConfig {
                field: "attention.block_reform",
                reason: "needs the sequences reordered into clusters (prepare() does it with attention.reorder; or SequenceDataset::reorder_clusters)".into(),
            });
        }
        Ok(())
    }

    /// The edges `(src, dst)` (positions) that sparse attention attends over in sequence
    /// `index`: the arcs of its induced subgraph, reformed into dense tiles by `reform` when
    /// given (needs the clusters of [`reorder_clusters`](Self::reorder_clusters)), then a
    /// self-loop on every node. Sorted, without repeats.
    ///
    /// # Errors
    ///
    /// [`TrainError::InvalidConfig`] naming `attention.block_reform` when `reform` is given but
    /// the sequences were not reordered into clusters.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn sequence_edges(
        &self,
        index: usize,
        reform: Option<&BlockReform>,
    ) -> Result<Vec<(u32, u32)>> {
        let members = &self.sequences[index];
        let graph = &self.dataset.graph;
        let position: std::collections::HashMap<u32, u32> = members
            .iter()
            .enumerate()
            .map(|(i, &node)| (node, i as u32))
            .collect();
        let mut arcs = Vec::new();
        for (dst, &node) in members.iter().enumerate() {
            for neighbour in graph.neighbors(node) {
                if let Some(&src) = position.get(neighbour)
                    && src != dst as u32
                {
                    arcs.push((src, dst as u32));
                }
            }
        }
        let arcs = match reform {
            None => arcs,
            Some(reform) => {
                let sizes = self.cluster_sizes.as_ref().and_then(|sizes| sizes.get(index)).ok_or_else(|| TrainError::InvalidConfig {
                    field: "attention.block_reform",
                    reason: "needs the sequences reordered into clusters (attention.reorder; SequenceDataset::reorder_clusters)".into(),
                })?;
                let reform = BlockReform {
                    seed: reform.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    ..*reform
                };
                reform_edges(&arcs, sizes, &reform)
            }
        };
        let mut edges: BTreeSet<(u32, u32)> = arcs.into_iter().collect();
        edges.extend((0..members.len() as u32).map(|i| (i, i)));
        Ok(edges.into_iter().collect())
    }

    /// [`sequence_edges`](Self::sequence_edges) of the sequences `indices`, as a batch on
    /// `device` (positions of `seq_len`-long sequences). With `graph_token` the positions are
    /// those of a model with Graphormer's graph token ([`join_global_token`]: the token at
    /// position 0 joined both ways to every node, `seq_len + 1` positions).
    ///
    /// # Errors
    ///
    /// As [`sequence_edges`](Self::sequence_edges).
    pub fn batch_edges<B: Backend>(
        &self,
        indices: &[usize],
        reform: Option<&BlockReform>,
        graph_token: bool,
        device: &B::Device,
    ) -> Result<SequenceEdges<B>> {
        let lists = indices
            .par_iter()
            .map(|&index| {
                let edges = self.sequence_edges(index, reform)?;
                Ok(if graph_token { join_global_token(&edges, self.sequences[index].len()) } else { edges })
            })
            .collect::<Result<Vec<_>>>()?;
        let seq_len = self.seq_len + usize::from(graph_token);
        SequenceEdges::new(&lists, seq_len, device).map_err(|source| {
            TrainError::InvalidConfig {
                field: "data.seq_len",
                reason: format!("the sparse attention edges do not fit the sequences: {source}"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use megagraph_graph::distance::{BfsBudget, DistanceScope};
    use megagraph_graph::sequence::{ReformThreshold, SequenceStrategy};
    use megagraph_graph::synthetic::CsbmConfig;

    use super::*;
    use crate::data::SequenceOptions;

    fn dataset() -> SequenceDataset {
        let options = SequenceOptions {
            seq_len: 128,
            strategy: SequenceStrategy::Locality,
            max_distance: 3,
            scope: DistanceScope::Graph,
            seed: 1,
            budget: BfsBudget::default(),
        };
        SequenceDataset::new(
            CsbmConfig {
                num_nodes: 500,
                ..CsbmConfig::default()
            }
            .generate()
            .expect("csbm"),
            options,
        )
        .expect("dataset")
    }

    #[test]
    fn the_edges_of_a_sequence_are_its_induced_arcs_and_self_loops() {
        let data = dataset();
        let members = &data.sequences[0];
        let edges = data.sequence_edges(0, None).expect("no reform");
        let graph = &data.dataset.graph;
        let expected: BTreeSet<(u32, u32)> = (0..members.len())
            .flat_map(|s| (0..members.len()).map(move |d| (s, d)))
            .filter(|&(s, d)| s == d || graph.has_edge(members[s], members[d]))
            .map(|(s, d)| (s as u32, d as u32))
            .collect();
        assert_eq!(edges, expected.into_iter().collect::<Vec<_>>());
        assert!(
            edges.len() > members.len(),
            "the CSBM sequence has edges besides self-loops"
        );
    }

    #[test]
    fn reordering_keeps_each_sequence_and_reform_needs_it() {
        let mut data = dataset();
        let before = data.sequences.clone();
        let reform = BlockReform {
            block: 16,
            threshold: ReformThreshold::All,
            seed: 3,
        };
        assert!(matches!(
            data.sequence_edges(0, Some(&reform)),
            Err(TrainError::InvalidConfig {
                field: "attention.block_reform",
                ..
            })
        ));
        // clusters of about 32 nodes: every pair is at least a tile wide
        data.reorder_clusters(4, 0).expect("valid sequences");
        for (old, new) in before.iter().zip(&data.sequences) {
            let (mut a, mut b) = (old.clone(), new.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "a permutation of the sequence");
        }
        let sizes = data.cluster_sizes().expect("clusters kept");
        assert!(
            sizes
                .iter()
                .zip(&data.sequences)
                .all(|(sizes, members)| sizes.iter().sum::<usize>() == members.len())
        );
        let reformed = data.sequence_edges(0, Some(&reform)).expect("clustered");
        let len = data.sequences[0].len() as u32;
        assert!(reformed.iter().all(|&(s, d)| s < len && d < len));
        assert!(
            (0..len).all(|i| reformed.binary_search(&(i, i)).is_ok()),
            "every node keeps its self-loop"
        );
        assert_ne!(
            reformed,
            data.sequence_edges(0, None).expect("no reform"),
            "p = 1 turns the pairs into tiles"
        );
        let batch = data
            .batch_edges::<burn::backend::Flex>(&[0, 1], Some(&reform), false, &Default::default())
            .expect("fits");
        assert_eq!(
            batch.len(),
            reformed.len()
                + data
                    .sequence_edges(1, Some(&reform))
                    .expect("clustered")
                    .len()
        );
    }
}

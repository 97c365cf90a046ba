//! The edge paths of a batch ([`EdgePaths`]): per pair of positions one shortest path of the
//! graph as rows of the batch's edge features, what a model with an edge encoding reads.

use std::collections::HashMap;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use megagraph_graph::distance::DistanceScope;
use megagraph_graph::{Dataset, EdgePathIndex};
use megagraph_models::encoders::EdgePaths;
use rayon::prelude::*;

use crate::error::{Result, TrainError};

/// Checks that `dataset` can feed an edge encoding: it has edge features.
///
/// # Errors
/// [`TrainError::InvalidConfig`] naming `model.edge_encoding` otherwise.
pub(crate) fn check_edge_features(dataset: &Dataset) -> Result<usize> {
    match &dataset.edge_features {
        Some(features) if features.dim > 0 => Ok(features.dim),
        _ => Err(TrainError::InvalidConfig {
            field: "model.edge_encoding",
            reason: format!(
                "dataset {:?} has no edge features (raw/edge-feat.csv, or [synthetic] edge_feature_dim > 0)",
                dataset.name
            ),
        }),
    }
}

/// The edge paths of the query rows `query_rows` of the sequences `sequences` (node lists)
/// padded to `frame` positions, `[batch, query_rows.len(), frame, max_distance]` (rows and
/// columns past a sequence have no path): their path tables ([`EdgePathIndex`], sequences in
/// parallel) over `max_distance` hops in `scope`, and the features of the edges the rows' paths
/// use, each edge once (in order of first use). `query_rows = 0..seq_len = frame` gives whole
/// sequences; a rank of a context-parallel ring asks for its block's rows.
///
/// # Panics
/// If `dataset` has no edge features ([`check_edge_features`] says so before training), or a
/// sequence is not a valid node list of its graph.
pub(crate) fn edge_paths<B: Backend>(
    dataset: &Dataset,
    sequences: &[&[u32]],
    query_rows: std::ops::Range<usize>,
    frame: usize,
    max_distance: u8,
    scope: DistanceScope,
    device: &B::Device,
) -> EdgePaths<B> {
    let features = dataset.edge_features.as_ref().expect("checked by check_edge_features");
    let hops = usize::from(max_distance);
    let tables: Vec<EdgePathIndex> = sequences
        .par_iter()
        .map(|nodes| {
            EdgePathIndex::new(&dataset.graph, nodes, max_distance, scope)
                .expect("sequences are node lists of the graph and max_distance was checked")
        })
        .collect();
    let batch = sequences.len();
    let mut rows: HashMap<usize, i64> = HashMap::new();
    let mut values: Vec<f32> = Vec::new();
    // `-1` until the edge count is known, then the sentinel row `edges`
    let width = query_rows.len();
    let mut ids = vec![-1i64; batch * width * frame * hops];
    let mut inverse_length = vec![0.0f32; batch * width * frame];
    for (b, table) in tables.iter().enumerate() {
        let (len, _) = table.shape();
        for i in query_rows.clone().filter(|&i| i < len) {
            for j in 0..len.min(frame) {
                let path = table.path(i, j);
                if path.is_empty() {
                    continue;
                }
                let pair = (b * width + i - query_rows.start) * frame + j;
                inverse_length[pair] = 1.0 / path.len() as f32;
                for (hop, &arc) in path.iter().enumerate() {
                    let next = rows.len() as i64;
                    ids[pair * hops + hop] = *rows.entry(arc).or_insert_with(|| {
                        values.extend_from_slice(features.row(arc));
                        next
                    });
                }
            }
        }
    }
    let edges = rows.len();
    for id in ids.iter_mut().filter(|id| **id < 0) {
        *id = edges as i64;
    }
    EdgePaths {
        features: Tensor::from_data(TensorData::new(values, [edges, features.dim]), device),
        edge_ids: Tensor::<B, 4, Int>::from_data(TensorData::new(ids, [batch, width, frame, hops]), device),
        inverse_length: Tensor::from_data(TensorData::new(inverse_length, [batch, width, frame]), device),
    }
}

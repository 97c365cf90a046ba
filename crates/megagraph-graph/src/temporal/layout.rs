//! Loader for the shared temporal layout:
//!
//! ```text
//! <dir>/edges.csv[.gz]   header "src,dst,time,label[,f0,...]", one event a line, sorted by time,
//!                        0-based node ids
//! <dir>/meta.json        optional: {"num_nodes", "num_events", "num_edge_features",
//!                        "bipartite", "positive_labels", "time_min", "time_max", ...}
//! ```
//!
//! `edges.csv.gz` is preferred when both it and `edges.csv` exist. Every count present in
//! `meta.json` is checked against the data; without `meta.json` (or its `num_nodes`) the node
//! count is the largest id + 1 and the bipartite flag is unknown.

use std::path::Path;

use serde::Deserialize;

use super::error::TemporalError;
use super::events::EventStream;
use super::rows::{RowLayout, columns, into_stream, max_node_count, parse_rows, read_head};
use crate::ogb::fields::show;
use crate::ogb::lines::SourceFile;
use crate::ogb::parse::read_json;

/// The `meta.json` fields the loader checks (all optional).
#[derive(Debug, Default, Deserialize)]
struct Meta {
    num_nodes: Option<u64>,
    num_events: Option<u64>,
    num_edge_features: Option<u64>,
    bipartite: Option<bool>,
    positive_labels: Option<u64>,
    time_min: Option<f64>,
    time_max: Option<f64>,
}

/// The leading header names of `edges.csv`.
const HEADER: [&str; 4] = ["src", "dst", "time", "label"];

/// Loads `<dir>/edges.csv[.gz]` and checks it against `<dir>/meta.json` (see the module docs).
///
/// # Errors
/// A [`TemporalError`] naming the file, line and field of a missing or malformed input
/// ([`TemporalError::Load`], [`TemporalError::Header`], [`TemporalError::UnsortedLine`]), or
/// [`TemporalError::MetaMismatch`] naming the `meta.json` field that disagrees with the data.
pub fn load_temporal_dir(dir: &Path) -> Result<EventStream, TemporalError> {
    let edges = SourceFile::require(&dir.join("edges.csv"))?;
    let meta_path = dir.join("meta.json");
    let meta = if meta_path.is_file() {
        read_json::<Meta>(&meta_path)?
    } else {
        log::warn!("{}: no meta.json; counts are not checked", dir.display());
        Meta::default()
    };
    let header = read_head(&edges, 1)?.into_iter().next().unwrap_or_default();
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    if names.len() < HEADER.len() || names[..HEADER.len()] != HEADER {
        return Err(TemporalError::Header {
            path: edges.path.clone(),
            line: 1,
            found: show(header.as_bytes()),
            expected: "src,dst,time,label followed by optional feature names",
        });
    }
    let feature_dim = names.len() - HEADER.len();
    let node_bound = meta.num_nodes.unwrap_or(u64::from(u32::MAX));
    let layout = RowLayout::src_dst_time_label(names.len(), node_bound);
    let rows = parse_rows(&edges, &layout)?;
    let c = columns(&edges.path, &rows)?;
    drop(rows);
    let num_nodes = match meta.num_nodes {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => max_node_count(&c),
    };
    let stream = into_stream(num_nodes, c, feature_dim)?.with_bipartite(meta.bipartite);
    check_meta(&meta_path, &meta, &stream)?;
    log::info!(
        "{}: {} events, {} nodes, {} edge features",
        dir.display(),
        stream.len(),
        stream.num_nodes(),
        stream.edge_feature_dim()
    );
    Ok(stream)
}

/// Checks every count and bound present in `meta` against the stream.
fn check_meta(path: &Path, meta: &Meta, s: &EventStream) -> Result<(), TemporalError> {
    let mismatch = |field: &'static str, meta: String, found: String| {
        Err(TemporalError::MetaMismatch {
            path: path.to_path_buf(),
            field,
            meta,
            found,
        })
    };
    let counts = [
        ("num_events", meta.num_events, s.len()),
        (
            "num_edge_features",
            meta.num_edge_features,
            s.edge_feature_dim(),
        ),
        ("positive_labels", meta.positive_labels, s.positive_labels()),
    ];
    for (field, expected, found) in counts {
        if let Some(e) = expected.filter(|&e| e != found as u64) {
            return mismatch(field, e.to_string(), found.to_string());
        }
    }
    let bounds = [
        ("time_min", meta.time_min, s.time().first()),
        ("time_max", meta.time_max, s.time().last()),
    ];
    for (field, expected, found) in bounds {
        if let Some(e) = expected {
            let close = found.is_some_and(|&f| (f - e).abs() <= 1e-9 * e.abs().max(1.0));
            if !close {
                let found = found.map_or("no events".to_string(), f64::to_string);
                return mismatch(field, e.to_string(), found);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! Loader for TGL's `edges.csv` (github amazon-research/tgl, `DATA/<NAME>/edges.csv`):
//!
//! ```text
//! ,src,dst,time,int_roll,ext_roll
//! 0,0,8227,0.0,0,0
//! ```
//!
//! A pandas export: the first column (empty header name) is the 0-based event index, checked to
//! count 0, 1, 2, ...; `src`, `dst` and `time` are found by name; `ext_roll` (0 = train,
//! 1 = validation, 2 = test), when present, is returned; other columns (`int_roll`) are ignored.
//! Node ids are used as they are (TGL already offsets the destination side of bipartite
//! graphs); the node count is the largest id + 1. Events carry no label (0).
//!
//! TGL stores edge features as a PyTorch tensor (`edge_features.pt`), which this crate cannot
//! read. Convert it to the documented replacement instead: a CSV of floats (gzip-compressed
//! when the name ends in `.gz`), no header, one row per event in `edges.csv` order, every row
//! as wide as the first, e.g. in Python
//! `numpy.savetxt("edge_features.csv", torch.load("edge_features.pt").numpy(), delimiter=",")`.

use std::path::Path;

use super::error::TemporalError;
use super::events::EventStream;
use super::rows::{
    Row, RowLayout, columns, into_stream, max_node_count, parse_rows, read_head, source_file,
};
use crate::ogb::fields::show;
use crate::ogb::parse::read_feature_rows;

/// A TGL stream and its `ext_roll` split column.
#[derive(Debug, Clone, PartialEq)]
pub struct TglStream {
    /// The events (bipartite flag unknown).
    pub events: EventStream,
    /// `ext_roll` per event (0 = train, 1 = validation, 2 = test) when the file has the column;
    /// see [`super::ChronologicalSplit::from_roll`].
    pub ext_roll: Option<Vec<u8>>,
}

/// Loads TGL's `edges.csv` and, optionally, an edge-feature CSV (see the module docs).
///
/// # Errors
/// A [`TemporalError`] naming the file and, where there is one, the line and field: a missing
/// file, a header without `src`, `dst` and `time` or whose first name is not empty
/// ([`TemporalError::Header`]), a malformed field ([`TemporalError::Load`]), an event index out
/// of sequence ([`TemporalError::EventIndex`]), an event earlier than its predecessor
/// ([`TemporalError::UnsortedLine`]), a feature file whose row count differs from the event
/// count.
pub fn load_tgl(edges: &Path, edge_features: Option<&Path>) -> Result<TglStream, TemporalError> {
    let src = source_file(edges)?;
    let header = read_head(&src, 1)?.into_iter().next().unwrap_or_default();
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let column = |name: &str| names.iter().position(|&n| n == name);
    let (Some(s), Some(d), Some(t), Some("")) = (
        column("src"),
        column("dst"),
        column("time"),
        names.first().copied(),
    ) else {
        return Err(TemporalError::Header {
            path: src.path.clone(),
            line: 1,
            found: show(header.as_bytes()),
            expected: "an empty first name (the event index) and columns src, dst and time",
        });
    };
    let roll = column("ext_roll");
    let layout = RowLayout {
        fields: names.len(),
        src: s,
        dst: d,
        time: t,
        label: None,
        index: Some(0),
        roll,
        features_from: None,
        node_bound: u64::from(u32::MAX),
    };
    let rows = parse_rows(&src, &layout)?;
    check_indices(edges, &rows)?;
    let ext_roll = roll.map(|_| rows.iter().map(|r| r.roll).collect());
    let c = columns(&src.path, &rows)?;
    drop(rows);
    let num_nodes = max_node_count(&c);
    let num_events = c.time.len();
    let mut events = into_stream(num_nodes, c, 0)?;
    if let Some(path) = edge_features {
        let file = source_file(path)?;
        let (dim, values) =
            read_feature_rows(&file, num_events, "edge-feature rows (one per event)")?;
        events = events.with_edge_features(dim, values)?;
    }
    log::info!(
        "{}: {} events, {} nodes, {} edge features",
        edges.display(),
        events.len(),
        events.num_nodes(),
        events.edge_feature_dim()
    );
    Ok(TglStream { events, ext_roll })
}

/// Checks that the event-index column counts 0, 1, 2, ...
fn check_indices(path: &Path, rows: &[Row]) -> Result<(), TemporalError> {
    match rows.iter().enumerate().find(|(i, r)| r.index != *i as u64) {
        Some((i, r)) => Err(TemporalError::EventIndex {
            path: path.to_path_buf(),
            line: r.line,
            expected: i as u64,
            found: r.index,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

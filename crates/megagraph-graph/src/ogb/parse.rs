//! Parsing the files of one dataset ([`Sources`]) into a [`Dataset`], the four readers in
//! parallel.

use std::fs;
use std::path::Path;

use serde::Deserialize;

use super::fields::{
    expect_one_field, field_count, parse_f32, parse_i64, parse_node_field, parse_node_line,
    parse_u64, show,
};
use super::lines::{
    self, BlankLines, SourceFile, parse_block, parse_file, parse_file_with_progress,
};
use super::sources::Sources;
use crate::dataset::{Dataset, NodeFeatures, Split};
use crate::edge_features::EdgeFeatures;
use crate::error::LoadError;
use crate::graph::{Graph, GraphOptions};

/// Optional `meta.json` fields used by the loader.
#[derive(Debug, Default, Deserialize)]
struct Meta {
    name: Option<String>,
}

pub(super) fn parse_dataset(
    dir: &Path,
    s: &Sources,
    graph_options: &GraphOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Dataset, LoadError> {
    let name = match &s.meta {
        Some(path) => read_meta(path)?.name,
        None => None,
    }
    .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
    .unwrap_or_else(|| "dataset".into());

    let num_nodes = read_count(&s.num_nodes)?;
    let num_nodes = u32::try_from(num_nodes.1)
        .map(|n| n as usize)
        .map_err(|_| LoadError::TooManyNodes {
            path: s.num_nodes.path.clone(),
            line: num_nodes.0,
            count: num_nodes.1,
        })?;

    let ((graph, features), (labels, split)) = rayon::join(
        || {
            rayon::join(
                || read_graph(s, num_nodes, graph_options, progress),
                || {
                    s.features
                        .as_ref()
                        .map(|f| read_features(f, num_nodes))
                        .transpose()
                },
            )
        },
        || {
            rayon::join(
                || read_labels(&s.labels, num_nodes),
                || -> Result<Split, LoadError> {
                    Ok(Split {
                        train: read_split(&s.train, num_nodes)?,
                        valid: read_split(&s.valid, num_nodes)?,
                        test: read_split(&s.test, num_nodes)?,
                    })
                },
            )
        },
    );
    let ((graph, edges), features, labels, split) = (graph?, features?, labels?, split?);
    let edge_features = s
        .edge_features
        .as_ref()
        .map(|src| read_edge_features(src, &graph, &edges))
        .transpose()?;
    check_split(&s.train.path, &split, &labels);
    let mut dataset = Dataset::from_labels(name, graph, features, labels, split);
    dataset.edge_features = edge_features;
    Ok(dataset)
}

fn read_meta(path: &Path) -> Result<Meta, LoadError> {
    read_json(path)
}

/// Reads a `meta.json`-like file into `T`.
///
/// # Errors
/// [`LoadError::Io`] if it cannot be read, [`LoadError::Meta`] (line, column, message) if it
/// is not valid JSON of the shape of `T`.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, LoadError> {
    let text = fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice::<T>(&text).map_err(|e| LoadError::Meta {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}

/// Reads a file holding exactly one non-negative integer; returns `(line, value)`.
fn read_count(src: &SourceFile) -> Result<(u64, u64), LoadError> {
    let path = &src.path;
    let (values, rows) = parse_file(src, |line, number, out: &mut Vec<(u64, u64)>| {
        let v = parse_u64(line).ok_or_else(|| LoadError::Parse {
            path: path.clone(),
            line: number,
            field: 1,
            value: show(line),
            expected: "a non-negative integer count",
        })?;
        out.push((number, v));
        Ok(())
    })?;
    match values.as_slice() {
        [one] => Ok(*one),
        _ => Err(LoadError::CountMismatch {
            path: path.clone(),
            what: "count rows (a single graph)",
            expected: 1,
            found: rows,
        }),
    }
}

/// Reads the edge file into the graph; returns it with the edge list as read (kept for the
/// edge features).
fn read_graph(
    s: &Sources,
    num_nodes: usize,
    options: &GraphOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(Graph, Vec<(u32, u32)>), LoadError> {
    let path = &s.edges.path;
    let parse = |line: &[u8], number: u64, out: &mut Vec<(u32, u32)>| {
        let mut fields = line.split(|&b| b == b',');
        let (Some(a), Some(b), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(LoadError::FieldCount {
                path: path.clone(),
                line: number,
                expected: 2,
                found: field_count(line),
            });
        };
        let src = parse_node_field(path, a, number, 1, num_nodes)?;
        let dst = parse_node_field(path, b, number, 2, num_nodes)?;
        out.push((src, dst));
        Ok(())
    };
    let (edges, rows) = parse_file_with_progress(&s.edges, progress, parse)?;
    if let Some(count_file) = &s.num_edges {
        let (_, expected) = read_count(count_file)?;
        if expected != rows {
            return Err(LoadError::CountMismatch {
                path: path.clone(),
                what: "edge rows (as in num-edge-list)",
                expected,
                found: rows,
            });
        }
    }
    let graph = Graph::from_edges(num_nodes, &edges, options).map_err(|source| LoadError::Graph {
        path: path.clone(),
        source,
    })?;
    Ok((graph, edges))
}

/// Reads `raw/edge-feat.csv`, one row per row of the edge file (`edges`, in its order), all as
/// wide as the first, into features of `graph`'s arcs.
///
/// # Errors
/// As [`read_feature_rows`] (file, line and field of a bad value or row width; a row count that
/// is not the edge file's).
fn read_edge_features(
    src: &SourceFile,
    graph: &Graph,
    edges: &[(u32, u32)],
) -> Result<EdgeFeatures, LoadError> {
    let (dim, values) =
        read_feature_rows(src, edges.len(), "edge feature rows (one per edge row)")?;
    EdgeFeatures::for_arcs(graph, edges, dim, &values).map_err(|source| LoadError::Graph {
        path: src.path.clone(),
        source,
    })
}

fn read_features(src: &SourceFile, num_nodes: usize) -> Result<NodeFeatures, LoadError> {
    let (dim, values) = read_feature_rows(src, num_nodes, "feature rows (one per node)")?;
    Ok(NodeFeatures {
        num_nodes,
        dim,
        values,
    })
}

/// Reads a file of `rows` rows of comma-separated finite floats, all as wide as the first
/// (`what` names the rows in a count error); returns `(dim, row-major values)`.
///
/// # Errors
/// A [`LoadError`] naming the file, line and field of a malformed value or ragged row, or
/// [`LoadError::CountMismatch`] if the file does not have `rows` rows.
pub(crate) fn read_feature_rows(
    src: &SourceFile,
    rows: usize,
    what: &'static str,
) -> Result<(usize, Vec<f32>), LoadError> {
    let path = &src.path;
    // The width of the first non-blank row fixes the dimension.
    let mut dim: Option<usize> = None;
    let mut values: Vec<f32> = Vec::new();
    let mut blanks = BlankLines::default();
    src.for_each_block(|block, first| {
        if dim.is_none() {
            dim = lines::lines(block)
                .find(|l| !lines::is_blank(l))
                .map(field_count);
            if let Some(d) = dim {
                values.reserve(rows.saturating_mul(d).min(1 << 28));
            }
        }
        let d = dim.unwrap_or(0);
        parse_block(
            block,
            first,
            &mut values,
            &mut blanks,
            |line, number, out| parse_feature_row(path, line, number, d, out),
        )
    })?;
    blanks.check(path)?;
    expect_row_per_node(path, what, blanks.content_lines(), rows)?;
    Ok((dim.unwrap_or(0), values))
}

/// Parses one feature row of exactly `dim` finite numbers, appending them to `out`.
fn parse_feature_row(
    path: &Path,
    line: &[u8],
    number: u64,
    dim: usize,
    out: &mut Vec<f32>,
) -> Result<(), LoadError> {
    let mut found = 0;
    for (i, field) in line.split(|&b| b == b',').enumerate() {
        if i == dim {
            return Err(LoadError::FieldCount {
                path: path.to_path_buf(),
                line: number,
                expected: dim,
                found: field_count(line),
            });
        }
        out.push(parse_feature(path, field, number, i + 1)?);
        found += 1;
    }
    if found != dim {
        return Err(LoadError::FieldCount {
            path: path.to_path_buf(),
            line: number,
            expected: dim,
            found,
        });
    }
    Ok(())
}

/// Parses field `index` (1-based) of line `line` as a finite feature value.
///
/// # Errors
/// [`LoadError::Parse`] if it is not a number, [`LoadError::NonFinite`] if it is NaN or
/// infinite.
pub(crate) fn parse_feature(
    path: &Path,
    field: &[u8],
    line: u64,
    index: usize,
) -> Result<f32, LoadError> {
    let v = parse_f32(field).ok_or_else(|| LoadError::Parse {
        path: path.to_path_buf(),
        line,
        field: index,
        value: show(field),
        expected: "a number",
    })?;
    if !v.is_finite() {
        return Err(LoadError::NonFinite {
            path: path.to_path_buf(),
            line,
            field: index,
            value: show(field),
        });
    }
    Ok(v)
}

fn read_labels(src: &SourceFile, num_nodes: usize) -> Result<Vec<i64>, LoadError> {
    let path = &src.path;
    let (labels, rows) = parse_file(src, |line, number, out: &mut Vec<i64>| {
        expect_one_field(path, line, number)?;
        let label = parse_i64(line).ok_or_else(|| LoadError::Parse {
            path: path.clone(),
            line: number,
            field: 1,
            value: show(line),
            expected: "an integer class id",
        })?;
        if label < -1 || label > i64::from(i32::MAX) {
            return Err(LoadError::InvalidLabel {
                path: path.clone(),
                line: number,
                label,
            });
        }
        out.push(label);
        Ok(())
    })?;
    expect_row_per_node(path, "label rows (one per node)", rows, num_nodes)?;
    Ok(labels)
}

/// Checks that `path` has `rows == num_nodes` rows of `what` (or, for edge features, one row
/// per edge row).
///
/// # Errors
/// [`LoadError::CountMismatch`] otherwise.
fn expect_row_per_node(
    path: &Path,
    what: &'static str,
    rows: u64,
    num_nodes: usize,
) -> Result<(), LoadError> {
    if rows != num_nodes as u64 {
        return Err(LoadError::CountMismatch {
            path: path.to_path_buf(),
            what,
            expected: num_nodes as u64,
            found: rows,
        });
    }
    Ok(())
}

fn read_split(src: &SourceFile, num_nodes: usize) -> Result<Vec<u32>, LoadError> {
    let path = &src.path;
    let (mut ids, _) = parse_file(src, |line, number, out: &mut Vec<u32>| {
        out.push(parse_node_line(path, line, number, num_nodes)?);
        Ok(())
    })?;
    if ids.is_empty() {
        return Err(LoadError::EmptySplit { path: path.clone() });
    }
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    if ids.len() != before {
        log::warn!(
            "{}: {} duplicate node ids ignored",
            path.display(),
            before - ids.len()
        );
    }
    Ok(ids)
}

/// Warns about split overlaps and unlabelled split nodes (legal, but usually a mistake).
fn check_split(train_path: &Path, split: &Split, labels: &[i64]) {
    let mut seen = vec![false; labels.len()];
    for (name, ids) in [
        ("train", &split.train),
        ("valid", &split.valid),
        ("test", &split.test),
    ] {
        let mut overlap = 0;
        let mut unlabelled = 0;
        for &v in ids.iter() {
            let s = &mut seen[v as usize];
            overlap += usize::from(*s);
            *s = true;
            unlabelled += usize::from(labels[v as usize] < 0);
        }
        if overlap > 0 {
            log::warn!(
                "split of {}: {overlap} {name} nodes also appear in an earlier split",
                train_path.display()
            );
        }
        if unlabelled > 0 {
            log::warn!(
                "split of {}: {unlabelled} {name} nodes are unlabelled",
                train_path.display()
            );
        }
    }
}

//! Reading event rows from a gzip-or-plain CSV file with a header line: the first lines of a
//! file, the per-row parser shared by the loaders, and assembling rows into an [`EventStream`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::error::TemporalError;
use super::events::EventStream;
use crate::error::LoadError;
use crate::ogb::fields::{field_count, parse_u64, show, trim};
use crate::ogb::lines::{SourceFile, parse_file};
use crate::ogb::parse::parse_feature;

/// One parsed data row of an event file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// 1-based line number.
    pub line: u64,
    /// Source id as read (before any offset).
    pub src: u64,
    /// Destination id as read (before any offset).
    pub dst: u64,
    /// Event time.
    pub time: f64,
    /// Event label (0 when the layout has none).
    pub label: u8,
    /// The event-index column (0 when the layout has none).
    pub index: u64,
    /// The TGL `ext_roll` column (0 when the layout has none).
    pub roll: u8,
    /// Edge features (empty when the layout has none).
    pub features: Vec<f32>,
}

/// Where the fields of an event row are (0-based columns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowLayout {
    /// Exact number of fields of every data row.
    pub fields: usize,
    /// Source-node column.
    pub src: usize,
    /// Destination-node column.
    pub dst: usize,
    /// Time column.
    pub time: usize,
    /// Label column, if any.
    pub label: Option<usize>,
    /// Event-index column, if any.
    pub index: Option<usize>,
    /// `ext_roll` column, if any.
    pub roll: Option<usize>,
    /// First edge-feature column (features run to the end of the row), if any.
    pub features_from: Option<usize>,
    /// Node ids must be below this bound.
    pub node_bound: u64,
}

impl RowLayout {
    /// The layout `src,dst,time,label[,features...]` with `fields >= 4` fields per row (the
    /// fields after the fourth are edge features) and node ids below `node_bound`.
    pub(crate) fn src_dst_time_label(fields: usize, node_bound: u64) -> RowLayout {
        RowLayout {
            fields,
            src: 0,
            dst: 1,
            time: 2,
            label: Some(3),
            index: None,
            roll: None,
            features_from: (fields > 4).then_some(4),
            node_bound,
        }
    }
}

/// The file at `path`, gzip-compressed when its name ends in `.gz`.
///
/// # Errors
/// [`LoadError::MissingFile`] if it is not a file.
pub(crate) fn source_file(path: &Path) -> Result<SourceFile, LoadError> {
    if !path.is_file() {
        return Err(LoadError::MissingFile {
            path: path.to_path_buf(),
        });
    }
    Ok(SourceFile {
        path: path.to_path_buf(),
        gz: path.extension().is_some_and(|e| e == "gz"),
    })
}

/// The first `n` lines of a file (fewer if it is shorter), without line endings.
///
/// # Errors
/// [`LoadError::Io`] or [`LoadError::Gzip`] naming the file.
pub(crate) fn read_head(src: &SourceFile, n: usize) -> Result<Vec<String>, LoadError> {
    let path = &src.path;
    let file = File::open(path).map_err(|source| LoadError::Io {
        path: path.clone(),
        source,
    })?;
    let reader: Box<dyn Read> = if src.gz {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(reader);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut line = String::new();
        let read = reader.read_line(&mut line).map_err(|source| {
            if src.gz {
                LoadError::Gzip {
                    path: path.clone(),
                    source,
                }
            } else {
                LoadError::Io {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        if read == 0 {
            break;
        }
        out.push(line.trim_end_matches(['\n', '\r']).to_string());
    }
    Ok(out)
}

/// Parses every data row of `src` (line 1 is the header and skipped) with `layout`.
///
/// # Errors
/// A [`LoadError`] naming the file, line and field of the first malformed row.
pub(crate) fn parse_rows(src: &SourceFile, layout: &RowLayout) -> Result<Vec<Row>, LoadError> {
    let path = &src.path;
    let (rows, _) = parse_file(src, |line, number, out: &mut Vec<Row>| {
        if number > 1 {
            out.push(parse_row(path, line, number, layout)?);
        }
        Ok(())
    })?;
    Ok(rows)
}

/// Parses one data row.
fn parse_row(path: &Path, line: &[u8], number: u64, layout: &RowLayout) -> Result<Row, LoadError> {
    let found = field_count(line);
    if found != layout.fields {
        return Err(LoadError::FieldCount {
            path: path.to_path_buf(),
            line: number,
            expected: layout.fields,
            found,
        });
    }
    let parse_error = |field: usize, value: &[u8], expected: &'static str| LoadError::Parse {
        path: path.to_path_buf(),
        line: number,
        field: field + 1,
        value: show(value),
        expected,
    };
    let mut row = Row {
        line: number,
        src: 0,
        dst: 0,
        time: 0.0,
        label: 0,
        index: 0,
        roll: 0,
        features: Vec::new(),
    };
    let feature_dim = layout.features_from.map_or(0, |f| layout.fields - f);
    row.features.reserve_exact(feature_dim);
    for (i, field) in line.split(|&b| b == b',').enumerate() {
        if i == layout.src || i == layout.dst {
            let node = parse_u64(field)
                .ok_or_else(|| parse_error(i, field, "a non-negative integer node id"))?;
            if node >= layout.node_bound {
                return Err(LoadError::NodeOutOfRange {
                    path: path.to_path_buf(),
                    line: number,
                    field: i + 1,
                    node,
                    num_nodes: usize::try_from(layout.node_bound).unwrap_or(usize::MAX),
                });
            }
            if i == layout.src {
                row.src = node;
            } else {
                row.dst = node;
            }
        } else if i == layout.time {
            row.time = std::str::from_utf8(trim(field))
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .filter(|t| t.is_finite())
                .ok_or_else(|| parse_error(i, field, "a finite number (time)"))?;
        } else if Some(i) == layout.label {
            row.label =
                small_int(field).ok_or_else(|| parse_error(i, field, "a label in 0..=255"))?;
        } else if Some(i) == layout.roll {
            row.roll = small_int(field)
                .filter(|&r| r <= 2)
                .ok_or_else(|| parse_error(i, field, "an ext_roll in 0..=2"))?;
        } else if Some(i) == layout.index {
            row.index = parse_u64(field)
                .ok_or_else(|| parse_error(i, field, "a non-negative integer event index"))?;
        } else if layout.features_from.is_some_and(|f| i >= f) {
            row.features
                .push(parse_feature(path, field, number, i + 1)?);
        }
    }
    Ok(row)
}

/// An integer in `0..=255`; also accepts an integral float such as `1.0` (some exports write
/// labels as floats).
fn small_int(field: &[u8]) -> Option<u8> {
    if let Some(v) = parse_u64(field) {
        return u8::try_from(v).ok();
    }
    let v: f64 = std::str::from_utf8(trim(field)).ok()?.parse().ok()?;
    (v.fract() == 0.0 && (0.0..=255.0).contains(&v)).then_some(v as u8)
}

/// The columns of parsed rows, after checking that times never decrease.
pub(crate) struct Columns {
    /// Source ids as read.
    pub src: Vec<u64>,
    /// Destination ids as read.
    pub dst: Vec<u64>,
    /// Times.
    pub time: Vec<f64>,
    /// Labels.
    pub label: Vec<u8>,
    /// Row-major edge features.
    pub features: Vec<f32>,
}

/// Splits rows into columns.
///
/// # Errors
/// [`TemporalError::UnsortedLine`] naming the line of the first event earlier than its
/// predecessor.
pub(crate) fn columns(path: &Path, rows: &[Row]) -> Result<Columns, TemporalError> {
    let mut previous: Option<f64> = None;
    for row in rows {
        if let Some(p) = previous.filter(|&p| row.time < p) {
            return Err(TemporalError::UnsortedLine {
                path: PathBuf::from(path),
                line: row.line,
                time: row.time,
                previous: p,
            });
        }
        previous = Some(row.time);
    }
    Ok(Columns {
        src: rows.iter().map(|r| r.src).collect(),
        dst: rows.iter().map(|r| r.dst).collect(),
        time: rows.iter().map(|r| r.time).collect(),
        label: rows.iter().map(|r| r.label).collect(),
        features: rows
            .iter()
            .flat_map(|r| r.features.iter().copied())
            .collect(),
    })
}

/// Builds the stream from columns whose ids are already final node ids.
///
/// # Errors
/// [`TemporalError::TooMany`] if an id or count does not fit `u32`; the errors of
/// [`EventStream::new`] and [`EventStream::with_edge_features`].
pub(crate) fn into_stream(
    num_nodes: usize,
    c: Columns,
    feature_dim: usize,
) -> Result<EventStream, TemporalError> {
    let to_u32 = |ids: Vec<u64>| -> Result<Vec<u32>, TemporalError> {
        ids.into_iter()
            .map(|v| {
                u32::try_from(v).map_err(|_| TemporalError::TooMany {
                    what: "nodes",
                    count: usize::try_from(v).unwrap_or(usize::MAX).saturating_add(1),
                })
            })
            .collect()
    };
    let stream = EventStream::new(num_nodes, to_u32(c.src)?, to_u32(c.dst)?, c.time, c.label)?;
    stream.with_edge_features(feature_dim, c.features)
}

/// The node count `max id + 1` over both endpoints (0 for no rows).
pub(crate) fn max_node_count(c: &Columns) -> usize {
    c.src.iter().chain(&c.dst).max().map_or(0, |&m| {
        usize::try_from(m).unwrap_or(usize::MAX).saturating_add(1)
    })
}

//! [`TemporalError`]: errors of event streams, their loaders, splits, generators and samplers.
//!
//! Errors from reading a file name the file and, where there is one, the 1-based line and
//! 1-based comma-separated field; errors about in-memory data name the event index or the
//! offending value.

use std::path::PathBuf;

use crate::error::LoadError;

/// An error from building, loading, splitting, generating or sampling a temporal event stream.
#[derive(Debug, thiserror::Error)]
pub enum TemporalError {
    /// A file-level error shared with the other loaders: missing file, I/O, gzip, a field that
    /// does not parse, a wrong field count, a blank line, a node id out of range, a non-finite
    /// feature, a row count, an invalid `meta.json`.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An event's time is earlier than the previous event's (streams are sorted by time;
    /// equal times are allowed).
    #[error("{}:{line}: time {time} is earlier than the previous event's time {previous} (events must be sorted by time)", path.display())]
    UnsortedLine {
        /// The file.
        path: PathBuf,
        /// 1-based line of the out-of-order event.
        line: u64,
        /// Its time.
        time: f64,
        /// The previous event's time.
        previous: f64,
    },
    /// An in-memory event's time is earlier than the previous event's.
    #[error(
        "event {event}: time {time} is earlier than the previous event's time {previous} (events must be sorted by time)"
    )]
    UnsortedEvent {
        /// 0-based index of the out-of-order event.
        event: usize,
        /// Its time.
        time: f64,
        /// The previous event's time.
        previous: f64,
    },
    /// An event time is NaN or infinite.
    #[error("event {event}: non-finite time {time}")]
    NonFiniteTime {
        /// 0-based event index.
        event: usize,
        /// The offending time.
        time: f64,
    },
    /// The columns of an event stream have different lengths.
    #[error("column {column} has {found} entries, expected {expected} (one per event)")]
    ColumnLength {
        /// The column, e.g. "dst".
        column: &'static str,
        /// Entries expected.
        expected: usize,
        /// Entries found.
        found: usize,
    },
    /// An in-memory node id is not below the node count.
    #[error(
        "{column} of event {event}: node {node} is out of range (the stream has {num_nodes} nodes)"
    )]
    NodeOutOfRange {
        /// "src", "dst" or "root".
        column: &'static str,
        /// 0-based index of the event (or root).
        event: usize,
        /// The offending id.
        node: u32,
        /// The node count.
        num_nodes: usize,
    },
    /// More events or nodes than `u32` ids can name.
    #[error("{count} {what} do not fit u32 ids (at most {max})", max = u32::MAX)]
    TooMany {
        /// "events" or "nodes".
        what: &'static str,
        /// The count.
        count: usize,
    },
    /// A header line does not name the expected columns.
    #[error("{}:{line}: header {found:?}: {expected}", path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// 1-based line of the header (1).
        line: u64,
        /// The header text (lossily decoded, at most 64 bytes).
        found: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An event label is not an integer in `0..=255`.
    #[error("{}:{line}: field {field}: invalid label {value:?}: labels are integers in 0..=255", path.display())]
    InvalidLabel {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based field.
        field: usize,
        /// The offending text.
        value: String,
    },
    /// A TGL event-index column disagrees with the row's position.
    #[error("{}:{line}: field 1: event index {found}, expected {expected} (rows must be numbered 0, 1, 2, ...)", path.display())]
    EventIndex {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The index expected (the 0-based data row).
        expected: u64,
        /// The index found.
        found: u64,
    },
    /// A `meta.json` value disagrees with the data.
    #[error("{}: field {field}: meta.json says {meta}, the data has {found}", path.display())]
    MetaMismatch {
        /// The `meta.json` file.
        path: PathBuf,
        /// The JSON field, e.g. "num_events".
        field: &'static str,
        /// The value in `meta.json`.
        meta: String,
        /// The value found in the data.
        found: String,
    },
    /// An edge-feature buffer is not `events * dim` long.
    #[error("edge features: {found} values is not {events} events x {dim} features")]
    FeatureShape {
        /// Number of events.
        events: usize,
        /// Features per event.
        dim: usize,
        /// Values given.
        found: usize,
    },
    /// A configuration or call argument has an invalid value.
    #[error("invalid {field} = {value}: {reason}")]
    InvalidConfig {
        /// Name of the field or argument.
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
}

impl TemporalError {
    /// An [`TemporalError::InvalidConfig`] for `field = value`.
    pub(crate) fn config(
        field: &'static str,
        value: impl std::fmt::Display,
        reason: &'static str,
    ) -> TemporalError {
        TemporalError::InvalidConfig {
            field,
            value: value.to_string(),
            reason,
        }
    }
}

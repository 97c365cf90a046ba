//! Error types: [`GraphError`] for in-memory graph operations and [`LoadError`] for reading
//! datasets from disk. Every variant names the offending value, and every [`LoadError`] names the
//! file (and the 1-based line and field where there is one).

use std::io;
use std::path::PathBuf;

/// An error from building or querying an in-memory graph, or from a generator's configuration.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// A node id is not below the node count.
    #[error("node {node} at position {position} is out of range: the graph has {num_nodes} nodes")]
    NodeOutOfRange {
        /// The offending node id.
        node: u64,
        /// The number of nodes of the graph.
        num_nodes: usize,
        /// Index of the offending entry in the input (edge index or position in a node list).
        position: usize,
    },
    /// The node count does not fit the `u32` node ids.
    #[error("{num_nodes} nodes do not fit u32 node ids (at most {max})", max = u32::MAX)]
    TooManyNodes {
        /// The requested node count.
        num_nodes: usize,
    },
    /// A node list that must hold distinct nodes holds one twice.
    #[error("node {node} appears twice in the node list (positions {first} and {second})")]
    DuplicateNode {
        /// The repeated node id.
        node: u32,
        /// Its first position.
        first: usize,
        /// Its second position.
        second: usize,
    },
    /// The largest exact distance of a distance index is too large for the `u8` encoding.
    #[error("max_distance {max_distance} is too large: at most 254 (255 is the 'farther' bucket)")]
    MaxDistanceTooLarge {
        /// The requested maximum distance.
        max_distance: u8,
    },
    /// A block of rows (e.g. of a sparse distance index) does not lie within `0..seq_len`.
    #[error(
        "row range {start}..{end} is not within 0..{seq_len} (start <= end <= sequence length)"
    )]
    RowRangeOutOfBounds {
        /// First row of the requested range.
        start: usize,
        /// One past the last row of the requested range.
        end: usize,
        /// The sequence length the rows index.
        seq_len: usize,
    },
    /// A class has fewer nodes than a class-balanced split draws from each class
    /// ([`ClassSplit`](crate::ClassSplit)).
    #[error("class {class} has {count} labelled nodes, fewer than the {per_class} training nodes per class of the split")]
    ClassTooSmall {
        /// The class id.
        class: usize,
        /// Its labelled nodes.
        count: usize,
        /// Training nodes the split draws from each class.
        per_class: usize,
    },
    /// Fewer labelled nodes are left after a class-balanced split's training nodes than its
    /// validation and test parts ask for ([`ClassSplit`](crate::ClassSplit)).
    #[error("a split of {valid} validation and {test} test nodes needs {} labelled nodes besides the training nodes; the dataset has {available}", valid + test)]
    SplitTooLarge {
        /// Validation nodes asked for.
        valid: usize,
        /// Test nodes asked for.
        test: usize,
        /// Labelled nodes left after the training nodes.
        available: usize,
    },
    /// A configuration field has an invalid value.
    #[error("invalid {field} = {value}: {reason}")]
    InvalidConfig {
        /// Name of the field.
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
}

/// An error from loading a dataset from disk.
///
/// Line numbers are 1-based and count physical lines of the (decompressed) file; fields are
/// 1-based comma-separated columns.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A required file (or directory) does not exist; for files, neither the `.gz` nor the plain
    /// variant was found.
    #[error("missing file {}", path.display())]
    MissingFile {
        /// The path looked for (the `.gz` variant for compressed-or-plain files).
        path: PathBuf,
    },
    /// An I/O error while reading a file.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A `.gz` file is not valid gzip (bad magic, corrupt or truncated stream).
    #[error("{} is not a valid gzip file: {source}", path.display())]
    Gzip {
        /// The compressed file.
        path: PathBuf,
        /// The decoder's error.
        source: io::Error,
    },
    /// A field is not a number of the expected kind.
    #[error("{}:{line}: field {field}: cannot parse {value:?} as {expected}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based field.
        field: usize,
        /// The offending text (lossily decoded, at most 64 bytes).
        value: String,
        /// What was expected, e.g. "a non-negative integer".
        expected: &'static str,
    },
    /// A line has the wrong number of comma-separated fields (e.g. a ragged feature row).
    #[error("{}:{line}: expected {expected} fields, found {found}", path.display())]
    FieldCount {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// Fields expected (for features: the width of the first row).
        expected: usize,
        /// Fields found.
        found: usize,
    },
    /// An empty line before the end of the file.
    #[error("{}:{line}: empty line", path.display())]
    EmptyLine {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
    },
    /// A node id is not below the node count (in the edge list or a split file).
    #[error("{}:{line}: field {field}: node {node} is out of range (the dataset has {num_nodes} nodes)", path.display())]
    NodeOutOfRange {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based field.
        field: usize,
        /// The offending node id.
        node: u64,
        /// The node count.
        num_nodes: usize,
    },
    /// A feature value is NaN or infinite.
    #[error("{}:{line}: field {field}: non-finite feature value {value:?}", path.display())]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based field.
        field: usize,
        /// The offending text.
        value: String,
    },
    /// A class label is negative but not -1 (the "unlabelled" marker), or above `i32::MAX`.
    #[error("{}:{line}: invalid label {label}: labels are class ids in 0..=2147483647 or -1 (unlabelled)", path.display())]
    InvalidLabel {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The offending label.
        label: i64,
    },
    /// A file has the wrong number of rows (labels or features per node, edge rows vs
    /// `num-edge-list`, a single row in `num-node-list`).
    #[error("{}: expected {expected} {what}, found {found}", path.display())]
    CountMismatch {
        /// The file.
        path: PathBuf,
        /// What is being counted, e.g. "label rows".
        what: &'static str,
        /// The expected count.
        expected: u64,
        /// The count found.
        found: u64,
    },
    /// A split file holds no node ids.
    #[error("{}: the split is empty", path.display())]
    EmptySplit {
        /// The split file.
        path: PathBuf,
    },
    /// The requested split scheme is not a folder under `split/`.
    #[error("unknown split scheme {requested:?} in {}: available: {available:?}", path.display())]
    UnknownSplitScheme {
        /// The `split` folder.
        path: PathBuf,
        /// The requested scheme.
        requested: String,
        /// The schemes found (sorted).
        available: Vec<String>,
    },
    /// The `split/` folder holds no scheme folder.
    #[error("no split scheme folder in {}", path.display())]
    NoSplitScheme {
        /// The `split` folder.
        path: PathBuf,
    },
    /// `meta.json` is not valid JSON of the expected shape.
    #[error("{}:{line}:{column}: invalid meta.json: {message}", path.display())]
    Meta {
        /// The meta file.
        path: PathBuf,
        /// 1-based line of the JSON error.
        line: usize,
        /// 1-based column of the JSON error.
        column: usize,
        /// The JSON parser's message.
        message: String,
    },
    /// The node count is not representable (more than `u32::MAX` nodes).
    #[error("{}:{line}: node count {count} does not fit u32 node ids", path.display())]
    TooManyNodes {
        /// The node count file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The count read.
        count: u64,
    },
    /// Building the graph failed.
    #[error("{}: {source}", path.display())]
    Graph {
        /// The edge file.
        path: PathBuf,
        /// The graph error.
        source: GraphError,
    },
}

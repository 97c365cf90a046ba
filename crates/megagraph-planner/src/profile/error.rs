//! [`ProfileError`]: why a profile cannot be loaded, saved or used.

use super::part::ProfiledPart;
use std::path::PathBuf;

/// Why a profile cannot be loaded, saved or used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Reading or writing the file failed.
    #[error("cannot access profile {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid profile table.
    #[error("{path}:{line}:{column}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A part has fewer than two samples, so no line can be fitted.
    #[error("profile part {part:?} has {count} samples: at least 2 distinct sizes are needed")]
    TooFewSamples {
        /// The part.
        part: ProfiledPart,
        /// Its sample count.
        count: usize,
    },
    /// A sample has a zero size or a negative or non-finite time, or sizes do not increase.
    #[error("profile part {part:?}, sample {index}: {field} = {value} ({reason})")]
    BadSample {
        /// The part.
        part: ProfiledPart,
        /// Index of the sample in the part's list.
        index: usize,
        /// Name of the offending field.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
    /// A solo ratio is not finite and positive, or compares with fewer than 2 copies.
    #[error("profile solo ratios: {field} = {value} ({reason})")]
    BadSoloRatio {
        /// The offending field, e.g. `attention.backward`.
        field: String,
        /// The offending value.
        value: String,
        /// What is required of it.
        reason: &'static str,
    },
    /// A cached profile was measured for something else.
    #[error("profile {path} has key {found} but {expected} was requested")]
    KeyMismatch {
        /// The file.
        path: PathBuf,
        /// The requested key's cache key.
        expected: String,
        /// The file's key's cache key.
        found: String,
    },
    /// The ladder of an analytic profile is too short or holds a zero.
    #[error("profile ladder {which} = {sizes:?}: need at least 2 distinct positive sizes")]
    BadLadder {
        /// `rows` or `blocks`.
        which: &'static str,
        /// The offending sizes.
        sizes: Vec<usize>,
    },
}

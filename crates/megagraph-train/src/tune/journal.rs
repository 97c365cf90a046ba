//! The trials journal: every finished trial, rewritten atomically after each one, so a search
//! killed at any moment resumes from the trials that finished.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{TuneError, TuneResult};
use super::space::TrialParams;
use crate::eval::SeedRun;

/// One finished trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    /// The trial's index in the planned order, from 0.
    pub index: usize,
    /// Its parameters.
    pub params: TrialParams,
    /// Its score: the mean best validation accuracy over its seeds.
    pub valid_accuracy: f64,
    /// Mean test accuracy of its seeds' best-validation models (reported, never used to
    /// choose).
    pub test_accuracy: f64,
    /// Mean seconds per epoch.
    pub seconds_per_epoch: f64,
    /// Id of the process that ran it (a resumed search shows which trials it inherited).
    pub pid: u32,
    /// Each seed's result.
    pub runs: Vec<SeedRun>,
}

/// The journal file's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// Identifies the search (space, planned trials and base config): a journal of another
    /// search is refused.
    pub fingerprint: String,
    /// The finished trials, in the order they finished.
    pub trials: Vec<TrialResult>,
}

impl Journal {
    /// The journal at `path`, or an empty one for `fingerprint` when there is no file.
    ///
    /// # Errors
    ///
    /// [`TuneError::Journal`] when the file cannot be read or parsed, or was written by a
    /// search with another fingerprint.
    pub fn load(path: &Path, fingerprint: &str) -> TuneResult<Self> {
        let failed = |message: String| TuneError::Journal {
            path: path.to_path_buf(),
            message,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    fingerprint: fingerprint.to_string(),
                    trials: Vec::new(),
                });
            }
            Err(err) => return Err(failed(err.to_string())),
        };
        let journal: Self = serde_json::from_str(&text)
            .map_err(|err| failed(format!("line {}: {err}", err.line())))?;
        if journal.fingerprint != fingerprint {
            return Err(failed(
                "was written by a search with another space, budget or base config: \
                 use another --out directory, or delete the journal to start over"
                    .into(),
            ));
        }
        Ok(journal)
    }

    /// The finished trial with index `index`.
    pub fn get(&self, index: usize) -> Option<&TrialResult> {
        self.trials.iter().find(|trial| trial.index == index)
    }

    /// Writes the journal to `path` atomically (temporary file, then rename).
    ///
    /// # Errors
    ///
    /// [`TuneError::Train`] wrapping the output error naming `path`.
    pub fn save(&self, path: &Path) -> TuneResult<()> {
        Ok(crate::files::write_json_atomically(path, self)?)
    }
}

/// The journal's path in the output directory `dir`.
pub fn journal_path(dir: &Path) -> PathBuf {
    dir.join("trials.json")
}

/// FNV-1a, 64 bits, as hex: a fingerprint stable across runs and builds.
pub fn fingerprint(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(index: usize) -> TrialResult {
        TrialResult {
            index,
            params: [(
                "optimizer.lr".to_string(),
                toml::Value::Float(0.001 * (index + 1) as f64),
            )]
            .into(),
            valid_accuracy: 0.5,
            test_accuracy: 0.4,
            seconds_per_epoch: 1.0,
            pid: 1,
            runs: Vec::new(),
        }
    }

    #[test]
    fn a_journal_round_trips_and_refuses_another_search() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal_path(dir.path());
        let empty = Journal::load(&path, "abc").unwrap();
        assert!(empty.trials.is_empty());
        let journal = Journal {
            fingerprint: "abc".into(),
            trials: vec![trial(0), trial(2)],
        };
        journal.save(&path).unwrap();
        let loaded = Journal::load(&path, "abc").unwrap();
        assert_eq!(loaded, journal);
        assert_eq!(loaded.get(2).map(|t| t.index), Some(2));
        assert!(loaded.get(1).is_none());
        let error = Journal::load(&path, "abd").unwrap_err().to_string();
        assert!(
            error.contains("trials.json") && error.contains("another"),
            "{error}"
        );
        std::fs::write(&path, "{ not json").unwrap();
        let error = Journal::load(&path, "abc").unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
    }

    #[test]
    fn fingerprints_are_fnv1a() {
        assert_eq!(fingerprint(""), "cbf29ce484222325");
        assert_eq!(fingerprint("a"), "af63dc4c8601ec8c");
    }
}

//! Output files written whole or not at all: [`write_atomically`] and
//! [`write_json_atomically`], used by the metrics, reports, plots and checkpoints here and by the
//! command line's plan and profile files.

use std::path::Path;

use serde::Serialize;

use crate::error::{Result, TrainError};

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
/// reader never sees a partial file and an old file is never lost.
///
/// # Errors
///
/// [`TrainError::Output`] naming `path` when the directory, the temporary file or the rename
/// fails (the temporary file is removed).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let output = |source| TrainError::Output {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(output)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|err| {
        let _ = std::fs::remove_file(&tmp);
        output(err)
    })
}

/// Writes `value` as pretty JSON to `path`, whole or not at all (see [`write_atomically`]).
///
/// # Errors
///
/// [`TrainError::Output`] naming `path` when `value` does not serialize or the write fails.
pub fn write_json_atomically<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec_pretty(value).map_err(|err| TrainError::Output {
        path: path.to_path_buf(),
        source: std::io::Error::other(err),
    })?;
    write_atomically(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/metrics.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}

//! A [`ProfileTable`] as a JSON file: [`ProfileTable::load`] and [`ProfileTable::save`].

use super::error::ProfileError;
use super::table::ProfileTable;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

impl ProfileTable {
    /// Reads and validates a profile from a JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let table: Self = read_json(path.as_ref())?;
        table.validate()?;
        Ok(table)
    }

    /// Writes this profile as pretty JSON, creating parent directories. The file is written
    /// atomically (a temporary file in the same folder, then a rename), so readers never see a
    /// half-written profile.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        write_json(path.as_ref(), self)
    }
}

/// Reads a JSON file as a `T`; a parse error names the file, line and column.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|error| ProfileError::Json {
        path: path.to_path_buf(),
        line: error.line(),
        column: error.column(),
        message: error.to_string(),
    })
}

/// Writes `value` as pretty JSON at `path`, creating parent directories, atomically (a
/// temporary file in the same folder, then a rename).
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ProfileError> {
    let io = |source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let text =
        serde_json::to_string_pretty(value).map_err(|error| io(std::io::Error::other(error)))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|error| {
        let _ = std::fs::remove_file(&tmp);
        io(error)
    })
}

#[cfg(test)]
mod tests {
    use crate::profile::{ProfileError, ProfileLadder, ProfileTable, analytic_profile, h200};
    use crate::workload::ModelShape;

    #[test]
    fn json_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let shape = ModelShape::paper();
        let ladder = ProfileLadder {
            rows: vec![64, 128, 256],
            blocks: vec![64, 128],
            ..ProfileLadder::default()
        };
        let table = analytic_profile(&h200(), "NVIDIA H200", &shape, 4, &ladder).unwrap();
        assert!(
            table
                .key
                .cache_key()
                .starts_with("analytic_NVIDIA-H200_f4_h8-d64")
        );
        let path = dir.path().join("nested").join("profile.json");
        table.save(&path).unwrap();
        let back = ProfileTable::load(&path).unwrap();
        assert_eq!(back, table);
        assert!(table.key.fits(
            &ModelShape {
                layers: 3,
                ..shape.clone()
            },
            4
        ));
        assert!(!table.key.fits(&shape, 2));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for field in [
            "size",
            "forward_seconds",
            "backward_seconds",
            "saved_bytes",
            "peak_bytes",
        ] {
            assert!(json["attention"][0].get(field).is_some(), "{field}");
        }
        // the key's fields as before: the shape's beside backend and device, no layer count
        let key = json["key"].as_object().unwrap();
        let mut names: Vec<&str> = key.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "backend",
                "degree_buckets",
                "device",
                "distance_buckets",
                "dtype_bytes",
                "feature_dim",
                "ffn",
                "heads",
                "hidden",
                "key_tile",
                "num_classes"
            ]
        );
        assert_eq!(key["ffn"], shape.ffn_hidden);
    }

    #[test]
    fn load_reports_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{\n  \"key\": 3\n}").unwrap();
        match ProfileTable::load(&path) {
            Err(ProfileError::Json { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected Json error, got {other:?}"),
        }
    }
}

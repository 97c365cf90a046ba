//! [`Sources`]: the files of one dataset in the OGB raw layout, found on disk.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::cache::SourceStamp;
use super::lines::SourceFile;
use crate::error::LoadError;

/// The files of one dataset, resolved on disk.
pub(super) struct Sources {
    /// `raw/num-node-list.csv`.
    pub(super) num_nodes: SourceFile,
    /// `raw/num-edge-list.csv`, if present.
    pub(super) num_edges: Option<SourceFile>,
    /// `raw/edge.csv`.
    pub(super) edges: SourceFile,
    /// `raw/node-feat.csv`, if present.
    pub(super) features: Option<SourceFile>,
    /// `raw/edge-feat.csv`, if present: one row per row of `edge.csv`. Not stamped: a dataset
    /// with edge features bypasses the cache (see [`load_ogb`](super::load_ogb)).
    pub(super) edge_features: Option<SourceFile>,
    /// `raw/node-label.csv`.
    pub(super) labels: SourceFile,
    /// `split/<scheme>/train.csv`.
    pub(super) train: SourceFile,
    /// `split/<scheme>/valid.csv`.
    pub(super) valid: SourceFile,
    /// `split/<scheme>/test.csv`.
    pub(super) test: SourceFile,
    /// `meta.json`, if present.
    pub(super) meta: Option<PathBuf>,
}

impl Sources {
    pub(super) fn resolve(dir: &Path, scheme_dir: &Path) -> Result<Sources, LoadError> {
        let raw = dir.join("raw");
        let meta = dir.join("meta.json");
        Ok(Sources {
            num_nodes: SourceFile::require(&raw.join("num-node-list.csv"))?,
            num_edges: SourceFile::find(&raw.join("num-edge-list.csv")),
            edges: SourceFile::require(&raw.join("edge.csv"))?,
            features: SourceFile::find(&raw.join("node-feat.csv")),
            edge_features: SourceFile::find(&raw.join("edge-feat.csv")),
            labels: SourceFile::require(&raw.join("node-label.csv"))?,
            train: SourceFile::require(&scheme_dir.join("train.csv"))?,
            valid: SourceFile::require(&scheme_dir.join("valid.csv"))?,
            test: SourceFile::require(&scheme_dir.join("test.csv"))?,
            meta: meta.is_file().then_some(meta),
        })
    }

    fn paths(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = vec![&self.num_nodes.path];
        v.extend(self.num_edges.as_ref().map(|s| s.path.as_path()));
        v.push(&self.edges.path);
        v.extend(self.features.as_ref().map(|s| s.path.as_path()));
        v.extend(
            [
                &self.labels.path,
                &self.train.path,
                &self.valid.path,
                &self.test.path,
            ]
            .map(PathBuf::as_path),
        );
        v.extend(self.meta.as_deref());
        v
    }

    pub(super) fn stamps(&self) -> Result<Vec<SourceStamp>, LoadError> {
        self.paths()
            .into_iter()
            .map(|p| {
                SourceStamp::of(p).map_err(|source| LoadError::Io {
                    path: p.to_path_buf(),
                    source,
                })
            })
            .collect()
    }
}

/// The error of opening `path`: [`LoadError::MissingFile`] if it does not exist, else
/// [`LoadError::Io`].
pub(super) fn open_error(path: &Path, source: io::Error) -> LoadError {
    if source.kind() == io::ErrorKind::NotFound {
        LoadError::MissingFile {
            path: path.to_path_buf(),
        }
    } else {
        LoadError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The split scheme folder name to use.
pub(super) fn resolve_scheme(dir: &Path, requested: Option<&str>) -> Result<String, LoadError> {
    let split = dir.join("split");
    let entries = fs::read_dir(&split).map_err(|source| open_error(&split, source))?;
    let mut available = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Io {
            path: split.clone(),
            source,
        })?;
        if entry.path().is_dir() {
            available.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    available.sort();
    match requested {
        Some(name) if available.iter().any(|a| a == name) => Ok(name.to_string()),
        Some(name) => Err(LoadError::UnknownSplitScheme {
            path: split,
            requested: name.to_string(),
            available,
        }),
        None => available
            .into_iter()
            .next()
            .ok_or(LoadError::NoSplitScheme { path: split }),
    }
}

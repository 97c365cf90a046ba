//! Loader for the OGB node-property-prediction raw layout, with a binary cache.
//!
//! ```text
//! <dir>/raw/edge.csv[.gz]            "src,dst" per line, 0-based node ids
//! <dir>/raw/node-feat.csv[.gz]       optional: one row of comma-separated floats per node
//! <dir>/raw/edge-feat.csv[.gz]     optional: one row of comma-separated floats per edge row
//! <dir>/raw/node-label.csv[.gz]      one class id per line, -1 = unlabelled
//! <dir>/raw/num-node-list.csv[.gz]   the node count
//! <dir>/raw/num-edge-list.csv[.gz]   optional: the edge-row count (checked when present)
//! <dir>/split/<scheme>/{train,valid,test}.csv[.gz]   node ids, one per line
//! <dir>/meta.json                    optional: {"name": ...}
//! ```
//!
//! Each file may be gzip-compressed (`.gz`, preferred when both exist) or plain.
//!
//! Edge features become per-arc features of the built graph ([`EdgeFeatures`](crate::EdgeFeatures):
//! both directions of an undirected edge share its row, a duplicate edge keeps its first row).
//! A dataset with edge features is parsed every time: the binary cache does not store them.

mod cache;
pub(crate) mod fields;
pub(crate) mod lines;
pub(crate) mod parse;
mod sources;
#[cfg(test)]
mod tests;

use std::fs;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;
use crate::error::LoadError;
use crate::graph::GraphOptions;
use cache::{CacheKey, CacheMiss};
use parse::parse_dataset;
use sources::{Sources, open_error, resolve_scheme};

/// How to load an OGB-layout dataset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadOptions {
    /// Split scheme folder under `split/`; `None` = the first one in sorted order (usually the
    /// only one). Default: `None`.
    pub split_scheme: Option<String>,
    /// How to build the graph. Default: symmetrized, self loops removed.
    pub graph: GraphOptions,
    /// Folder for the binary cache; `None` = no cache. Default: `None`. See
    /// [`default_cache_dir`]. A folder inside the dataset folder is refused (with a warning).
    pub cache_dir: Option<PathBuf>,
}

/// The default cache folder: `$MEGAGRAPH_CACHE`, else `$XDG_CACHE_HOME/megagraph`, else
/// `$HOME/.cache/megagraph`, else `<temp dir>/megagraph-cache`.
pub fn default_cache_dir() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var("MEGAGRAPH_CACHE") {
        return dir;
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("megagraph");
    }
    if let Some(home) = var("HOME") {
        return home.join(".cache").join("megagraph");
    }
    std::env::temp_dir().join("megagraph-cache")
}

/// Loads a dataset in the OGB node-property raw layout (see the module docs).
///
/// With `options.cache_dir`, a valid cache entry (same canonical folder, split scheme and graph
/// options; unchanged source sizes and modification times; intact checksum) is returned instead
/// of parsing; a stale or corrupt entry is reported with `log::warn!` and rebuilt. The cache is
/// written atomically after a successful parse; failing to write it is only a warning.
///
/// # Errors
/// A [`LoadError`] naming the file, and the 1-based line and field where there is one, for every
/// missing or malformed input.
pub fn load_ogb(dir: &Path, options: &LoadOptions) -> Result<Dataset, LoadError> {
    load_ogb_with_progress(dir, options, &|_, _| {})
}

/// [`load_ogb`], reporting how far parsing the edge file (the long step) has come:
/// `progress(read, total)` is called from the loading thread after each block of about 8 MiB of
/// text, with the bytes of the edge file on disk read so far (compressed bytes for `.gz`) and
/// its size, e.g. to drive a progress bar of `total` bytes. It is not called when the cache
/// answers.
///
/// # Errors
/// As [`load_ogb`].
pub fn load_ogb_with_progress(
    dir: &Path,
    options: &LoadOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Dataset, LoadError> {
    let dir = fs::canonicalize(dir).map_err(|source| open_error(dir, source))?;
    let scheme = resolve_scheme(&dir, options.split_scheme.as_deref())?;
    let sources = Sources::resolve(&dir, &dir.join("split").join(&scheme))?;

    // the cache format holds no edge features: such datasets are parsed every time
    let cache_dir = options.cache_dir.as_ref().filter(|_| {
        let bypass = sources.edge_features.is_some();
        if bypass {
            log::debug!("{} has edge features: not using the dataset cache", dir.display());
        }
        !bypass
    });
    let cache = match cache_dir {
        Some(cache_dir) => usable_cache_dir(cache_dir, &dir).map(|cache_dir| {
            let key = CacheKey {
                dir: dir.to_string_lossy().into_owned(),
                scheme: scheme.clone(),
                options: options.graph,
            };
            let path = cache::cache_path(&cache_dir, &key);
            (key, path)
        }),
        None => None,
    };
    let stamps = match &cache {
        Some(_) => Some(sources.stamps()?),
        None => None,
    };
    if let (Some((key, path)), Some(stamps)) = (&cache, &stamps) {
        match cache::read(path, key, stamps) {
            Ok(ds) => {
                log::debug!("loaded {} from cache {}", dir.display(), path.display());
                return Ok(ds);
            }
            Err(CacheMiss::Absent) => {}
            Err(CacheMiss::Stale(why)) => {
                log::warn!("stale dataset cache {} ({why}); rebuilding", path.display());
            }
            Err(CacheMiss::Corrupt(why)) => {
                log::warn!(
                    "corrupt dataset cache {} ({why}); rebuilding",
                    path.display()
                );
            }
        }
    }

    let start = std::time::Instant::now();
    let dataset = parse_dataset(&dir, &sources, &options.graph, progress)?;
    log::debug!(
        "parsed {} ({} edge rows) in {:.2?}",
        dir.display(),
        dataset.graph.num_input_edges(),
        start.elapsed()
    );

    if let (Some((key, path)), Some(stamps)) = (&cache, &stamps) {
        match cache::write(path, key, stamps, &dataset) {
            Ok(()) => log::debug!("wrote dataset cache {}", path.display()),
            Err(e) => log::warn!("cannot write dataset cache {}: {e}", path.display()),
        }
    }
    Ok(dataset)
}

/// The cache folder as an absolute path, or `None` (with a warning) if it lies inside the
/// dataset folder.
fn usable_cache_dir(cache_dir: &Path, dataset_dir: &Path) -> Option<PathBuf> {
    let absolute = if cache_dir.is_absolute() {
        cache_dir.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(cache_dir),
            Err(e) => {
                log::warn!(
                    "cannot resolve cache folder {}: {e}; not caching",
                    cache_dir.display()
                );
                return None;
            }
        }
    };
    // Resolve symlinks of the longest existing ancestor, then normalize the rest lexically.
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    let resolved = loop {
        if let Ok(c) = fs::canonicalize(existing) {
            break c;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break existing.to_path_buf(),
        }
    };
    let mut full = resolved;
    for name in rest.into_iter().rev() {
        full.push(name);
    }
    let mut normal = PathBuf::new();
    for c in full.components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other.as_os_str()),
        }
    }
    if normal.starts_with(dataset_dir) {
        log::warn!(
            "cache folder {} is inside the dataset folder {}; not caching",
            normal.display(),
            dataset_dir.display()
        );
        return None;
    }
    Some(normal)
}

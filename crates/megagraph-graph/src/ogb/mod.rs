//! Loader for the OGB node-property-prediction raw layout, with a binary cache.
//!
//! ```text
//! <dir>/raw/edge.csv[.gz]            "src,dst" per line, 0-based node ids
//! <dir>/raw/node-feat.csv[.gz]       optional: one row of comma-separated floats per node
//! <dir>/raw/node-label.csv[.gz]      one class id per line, -1 = unlabelled
//! <dir>/raw/num-node-list.csv[.gz]   the node count
//! <dir>/raw/num-edge-list.csv[.gz]   optional: the edge-row count (checked when present)
//! <dir>/split/<scheme>/{train,valid,test}.csv[.gz]   node ids, one per line
//! <dir>/meta.json                    optional: {"name": ...}
//! ```
//!
//! Each file may be gzip-compressed (`.gz`, preferred when both exist) or plain.

mod cache;
mod lines;

use std::fs;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, NodeFeatures, Split};
use crate::error::LoadError;
use crate::graph::{Graph, GraphOptions};
use cache::{CacheKey, CacheMiss, SourceStamp};
use lines::{
    BlankLines, SourceFile, parse_block, parse_f32, parse_file, parse_file_with_progress,
    parse_i64, parse_node_field, parse_node_line, parse_u64, show,
};

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

/// Optional `meta.json` fields used by the loader.
#[derive(Debug, Default, Deserialize)]
struct Meta {
    name: Option<String>,
}

/// The files of one dataset, resolved on disk.
struct Sources {
    num_nodes: SourceFile,
    num_edges: Option<SourceFile>,
    edges: SourceFile,
    features: Option<SourceFile>,
    labels: SourceFile,
    train: SourceFile,
    valid: SourceFile,
    test: SourceFile,
    meta: Option<PathBuf>,
}

impl Sources {
    fn resolve(dir: &Path, scheme_dir: &Path) -> Result<Sources, LoadError> {
        let raw = dir.join("raw");
        let meta = dir.join("meta.json");
        Ok(Sources {
            num_nodes: SourceFile::require(&raw.join("num-node-list.csv"))?,
            num_edges: SourceFile::find(&raw.join("num-edge-list.csv")),
            edges: SourceFile::require(&raw.join("edge.csv"))?,
            features: SourceFile::find(&raw.join("node-feat.csv")),
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

    fn stamps(&self) -> Result<Vec<SourceStamp>, LoadError> {
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
    let dir = fs::canonicalize(dir).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LoadError::MissingFile {
                path: dir.to_path_buf(),
            }
        } else {
            LoadError::Io {
                path: dir.to_path_buf(),
                source,
            }
        }
    })?;
    let scheme = resolve_scheme(&dir, options.split_scheme.as_deref())?;
    let sources = Sources::resolve(&dir, &dir.join("split").join(&scheme))?;

    let cache = match &options.cache_dir {
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

/// The split scheme folder name to use.
fn resolve_scheme(dir: &Path, requested: Option<&str>) -> Result<String, LoadError> {
    let split = dir.join("split");
    let entries = fs::read_dir(&split).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LoadError::MissingFile {
                path: split.clone(),
            }
        } else {
            LoadError::Io {
                path: split.clone(),
                source,
            }
        }
    })?;
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

fn parse_dataset(
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
    let (graph, features, labels, split) = (graph?, features?, labels?, split?);
    check_split(&s.train.path, &split, &labels);
    Ok(Dataset::from_labels(name, graph, features, labels, split))
}

fn read_meta(path: &Path) -> Result<Meta, LoadError> {
    let text = fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice::<Meta>(&text).map_err(|e| LoadError::Meta {
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

fn read_graph(
    s: &Sources,
    num_nodes: usize,
    options: &GraphOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Graph, LoadError> {
    let path = &s.edges.path;
    let parse = |line: &[u8], number: u64, out: &mut Vec<(u32, u32)>| {
        let mut fields = line.split(|&b| b == b',');
        let (Some(a), Some(b), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(LoadError::FieldCount {
                path: path.clone(),
                line: number,
                expected: 2,
                found: line.iter().filter(|&&b| b == b',').count() + 1,
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
    Graph::from_edges(num_nodes, &edges, options).map_err(|source| LoadError::Graph {
        path: path.clone(),
        source,
    })
}

fn read_features(src: &SourceFile, num_nodes: usize) -> Result<NodeFeatures, LoadError> {
    let path = &src.path;
    // The width of the first non-blank row fixes the dimension.
    let mut dim: Option<usize> = None;
    let mut values: Vec<f32> = Vec::new();
    let mut blanks = BlankLines::default();
    src.for_each_block(|block, first| {
        if dim.is_none() {
            dim = lines::lines(block)
                .find(|l| !lines::is_blank(l))
                .map(|l| l.iter().filter(|&&b| b == b',').count() + 1);
            if let Some(d) = dim {
                values.reserve(num_nodes.saturating_mul(d).min(1 << 28));
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
    let rows = blanks.content_lines();
    if rows != num_nodes as u64 {
        return Err(LoadError::CountMismatch {
            path: path.clone(),
            what: "feature rows (one per node)",
            expected: num_nodes as u64,
            found: rows,
        });
    }
    Ok(NodeFeatures {
        num_nodes,
        dim: dim.unwrap_or(0),
        values,
    })
}

/// Parses one feature row of exactly `dim` finite numbers, appending them to `out`.
fn parse_feature_row(
    path: &Path,
    line: &[u8],
    number: u64,
    dim: usize,
    out: &mut Vec<f32>,
) -> Result<(), LoadError> {
    let field_count = || line.iter().filter(|&&b| b == b',').count() + 1;
    let mut found = 0;
    for (i, field) in line.split(|&b| b == b',').enumerate() {
        if i == dim {
            return Err(LoadError::FieldCount {
                path: path.to_path_buf(),
                line: number,
                expected: dim,
                found: field_count(),
            });
        }
        let v = parse_f32(field).ok_or_else(|| LoadError::Parse {
            path: path.to_path_buf(),
            line: number,
            field: i + 1,
            value: show(field),
            expected: "a number",
        })?;
        if !v.is_finite() {
            return Err(LoadError::NonFinite {
                path: path.to_path_buf(),
                line: number,
                field: i + 1,
                value: show(field),
            });
        }
        out.push(v);
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

fn read_labels(src: &SourceFile, num_nodes: usize) -> Result<Vec<i64>, LoadError> {
    let path = &src.path;
    let (labels, rows) = parse_file(src, |line, number, out: &mut Vec<i64>| {
        let fields = line.iter().filter(|&&b| b == b',').count() + 1;
        if fields != 1 {
            return Err(LoadError::FieldCount {
                path: path.clone(),
                line: number,
                expected: 1,
                found: fields,
            });
        }
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
    if rows != num_nodes as u64 {
        return Err(LoadError::CountMismatch {
            path: path.clone(),
            what: "label rows (one per node)",
            expected: num_nodes as u64,
            found: rows,
        });
    }
    Ok(labels)
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

#[cfg(test)]
mod tests;

//! Binary dataset cache: roundtrip, stale and corrupt entries are rebuilt (with a warning),
//! nothing is ever written into the dataset folder.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use common::{fixture, list_files, write};
use megagraph_graph::{Dataset, GraphOptions, LoadOptions, load_ogb};

/// Captures log records so the tests can check the warnings.
struct Capture;
static RECORDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        if let Ok(mut r) = RECORDS.lock() {
            r.push(format!("{} {}", record.level(), record.args()));
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    static LOGGER: Capture = Capture;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}

/// Warnings logged so far that mention `needle`.
fn warnings_about(needle: &str) -> Vec<String> {
    RECORDS
        .lock()
        .map(|r| {
            r.iter()
                .filter(|m| m.starts_with("WARN") && m.contains(needle))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn options(cache: &Path) -> LoadOptions {
    LoadOptions {
        cache_dir: Some(cache.to_path_buf()),
        ..LoadOptions::default()
    }
}

/// The single cache file in `cache`.
fn cache_file(cache: &Path) -> PathBuf {
    let files: Vec<PathBuf> = list_files(cache)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "mgcache"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// Replaces the content of `path` keeping its size and modification time.
fn replace_keeping_stamp(path: &Path, content: &[u8]) {
    let before = fs::metadata(path).unwrap();
    assert_eq!(before.len(), content.len() as u64);
    fs::write(path, content).unwrap();
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(before.modified().unwrap()).unwrap();
}

fn load(dir: &Path, cache: &Path) -> Dataset {
    load_ogb(dir, &options(cache)).unwrap()
}

#[test]
fn roundtrip_uses_the_cache() {
    init_log();
    let data = fixture(false);
    let cache = tempfile::tempdir().unwrap();
    let fresh = load(data.path(), cache.path());
    let file = cache_file(cache.path());
    let again = load(data.path(), cache.path());
    assert_eq!(fresh, again);
    assert_eq!(
        again,
        load_ogb(data.path(), &LoadOptions::default()).unwrap()
    );

    // Same size and mtime, different content: the cache (old content) must be served.
    let edges = data.path().join("raw/edge.csv");
    replace_keeping_stamp(&edges, b"0,2\n1,3\n2,4\n3,0\n");
    let cached = load(data.path(), cache.path());
    assert_eq!(cached, fresh, "the cache was not used");
    assert_eq!(cache_file(cache.path()), file);
    assert!(warnings_about(&file.display().to_string()).is_empty());
}

#[test]
fn changed_sources_rebuild_the_cache() {
    init_log();
    let data = fixture(true);
    let cache = tempfile::tempdir().unwrap();
    let fresh = load(data.path(), cache.path());
    let file = cache_file(cache.path());
    let name = file.display().to_string();

    // Same size, new mtime (a "touch" plus an edit): rebuilt, so the new content shows.
    write(data.path(), "raw/edge.csv", b"0,1\n1,2\n2,3\n3,4\n", true);
    let edges = data.path().join("raw/edge.csv.gz");
    let old_len = fs::metadata(&edges).unwrap().len();
    write(data.path(), "raw/edge.csv", b"0,2\n1,3\n2,4\n3,0\n", true);
    assert_eq!(fs::metadata(&edges).unwrap().len(), old_len);
    let f = fs::File::options().write(true).open(&edges).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    let rebuilt = load(data.path(), cache.path());
    assert_ne!(rebuilt.graph, fresh.graph);
    assert_eq!(rebuilt.graph.neighbors(0), &[2, 3]);
    assert!(
        warnings_about(&name).iter().any(|w| w.contains("stale")),
        "{:?}",
        warnings_about(&name)
    );
    // And the rewritten cache now serves the new content.
    assert_eq!(load(data.path(), cache.path()), rebuilt);

    // A new size (labels edited).
    write(data.path(), "raw/node-label.csv", b"0\n1\n2\n3\n4\n", true);
    let relabelled = load(data.path(), cache.path());
    assert_eq!(relabelled.num_classes, 5);

    // A file appearing (plain meta replaced) or disappearing (features removed) is a change too.
    fs::remove_file(data.path().join("raw/node-feat.csv.gz")).unwrap();
    assert!(load(data.path(), cache.path()).features.is_none());
    assert_eq!(cache_file(cache.path()), file);
}

#[test]
fn corrupt_caches_are_rebuilt_with_the_same_result() {
    init_log();
    let data = fixture(true);
    let cache = tempfile::tempdir().unwrap();
    let fresh = load(data.path(), cache.path());
    let file = cache_file(cache.path());
    let good = fs::read(&file).unwrap();
    let name = file.display().to_string();

    let mut damaged: Vec<(&str, Vec<u8>)> = Vec::new();
    for at in [
        good.len() / 3,
        good.len() / 2,
        good.len() - 20,
        good.len() - 3,
    ] {
        let mut b = good.clone();
        b[at] ^= 0x40;
        damaged.push(("flipped byte", b));
    }
    damaged.push(("truncated", good[..good.len() - 9].to_vec()));
    damaged.push(("empty", Vec::new()));
    let mut magic = good.clone();
    magic[0] = b'X';
    damaged.push(("bad magic", magic));
    let mut version = good.clone();
    version[8] = 99;
    damaged.push(("bad version", version));

    for (what, bytes) in damaged {
        let before = warnings_about(&name).len();
        fs::write(&file, &bytes).unwrap();
        let loaded = load(data.path(), cache.path());
        assert_eq!(loaded, fresh, "{what}");
        let warnings = warnings_about(&name);
        assert!(warnings.len() > before, "{what}: no warning");
        assert!(
            warnings.last().unwrap().contains("corrupt"),
            "{what}: {warnings:?}"
        );
        assert_eq!(
            fs::read(&file).unwrap(),
            good,
            "{what}: cache not rewritten"
        );
    }
}

#[test]
fn never_writes_into_the_dataset_folder() {
    init_log();
    let data = fixture(true);
    let before = list_files(data.path());
    let cache = tempfile::tempdir().unwrap();
    load(data.path(), cache.path());
    load(data.path(), cache.path());
    assert_eq!(list_files(data.path()), before);
    assert!(!list_files(cache.path()).is_empty());
    // Leftover temporary files would show up here.
    assert_eq!(list_files(cache.path()).len(), 1);

    // A cache folder inside the dataset folder is refused, with a warning.
    for inside in [
        data.path().join("cache"),
        data.path().join("raw/../.cache"),
        data.path().to_path_buf(),
    ] {
        let ds = load_ogb(data.path(), &options(&inside)).unwrap();
        assert_eq!(ds.graph.num_nodes(), 5);
        assert_eq!(list_files(data.path()), before, "{}", inside.display());
        assert!(!data.path().join("cache").exists());
    }
    assert!(!warnings_about("inside the dataset folder").is_empty());
}

#[test]
fn options_and_schemes_get_their_own_cache_files() {
    let data = fixture(false);
    let cache = tempfile::tempdir().unwrap();
    let default = load(data.path(), cache.path());
    let directed = LoadOptions {
        graph: GraphOptions {
            symmetrize: false,
            ..GraphOptions::default()
        },
        ..options(cache.path())
    };
    let d = load_ogb(data.path(), &directed).unwrap();
    let s2 = LoadOptions {
        split_scheme: Some("s2".into()),
        ..options(cache.path())
    };
    let other = load_ogb(data.path(), &s2).unwrap();
    assert_eq!(list_files(cache.path()).len(), 3);
    // Served from cache, each still matches its own options.
    assert_eq!(load_ogb(data.path(), &directed).unwrap(), d);
    assert_eq!(load_ogb(data.path(), &s2).unwrap(), other);
    assert_eq!(load(data.path(), cache.path()), default);
    assert!(!d.graph.is_symmetric() && default.graph.is_symmetric());
    assert_ne!(other.split, default.split);
}

//! Shared helpers of the integration tests: small OGB-layout fixtures.

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The files of the default fixture (relative path without `.gz`, content). 5 nodes, a path
/// graph, 3 features, one unlabelled node, two split schemes.
pub const FILES: &[(&str, &str)] = &[
    ("raw/num-node-list.csv", "5\n"),
    ("raw/num-edge-list.csv", "4\n"),
    ("raw/edge.csv", "0,1\n1,2\n2,3\n3,4\n"),
    (
        "raw/node-feat.csv",
        "0.5,1,2\n-1.5,0,3e-1\n1,1,1\n0,0,0\n2.25,-3,4\n",
    ),
    ("raw/node-label.csv", "0\n1\n2\n-1\n1\n"),
    ("split/s1/train.csv", "1\n0\n"),
    ("split/s1/valid.csv", "2\n"),
    ("split/s1/test.csv", "3\n4\n"),
    ("split/s2/train.csv", "4\n"),
    ("split/s2/valid.csv", "3\n"),
    ("split/s2/test.csv", "0\n1\n2\n"),
];

/// Writes `content` to `dir/rel` (gzip-compressed to `dir/rel.gz` if `gz`), replacing any
/// existing variant of the file.
pub fn write(dir: &Path, rel: &str, content: &[u8], gz: bool) {
    let plain = dir.join(rel);
    let zipped = PathBuf::from(format!("{}.gz", plain.display()));
    fs::create_dir_all(plain.parent().expect("parent")).expect("mkdir");
    let _ = fs::remove_file(&plain);
    let _ = fs::remove_file(&zipped);
    if gz {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(content).expect("gzip");
        fs::write(&zipped, enc.finish().expect("gzip")).expect("write");
    } else {
        fs::write(&plain, content).expect("write");
    }
}

/// A fresh fixture in a temporary folder (with `meta.json` naming it "tiny").
pub fn fixture(gz: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, content) in FILES {
        write(dir.path(), rel, content.as_bytes(), gz);
    }
    fs::write(
        dir.path().join("meta.json"),
        r#"{"name": "tiny", "num_nodes": 5}"#,
    )
    .expect("meta");
    dir
}

/// Path of the (possibly compressed) fixture file `rel`.
pub fn path_of(dir: &Path, rel: &str, gz: bool) -> PathBuf {
    if gz {
        dir.join(format!("{rel}.gz"))
    } else {
        dir.join(rel)
    }
}

/// Every file under `dir`, recursively, sorted.
pub fn list_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read_dir") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

//! Test helper: writing small (optionally gzip-compressed) files.

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

/// Writes `text` to `dir/name` (gzip-compressed to `dir/name.gz` if `gz`); returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, text: &str, gz: bool) -> PathBuf {
    if gz {
        let path = dir.join(format!("{name}.gz"));
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(text.as_bytes()).expect("gzip");
        std::fs::write(&path, enc.finish().expect("gzip")).expect("write");
        path
    } else {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

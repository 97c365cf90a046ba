//! Binary cache of parsed datasets.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! magic   b"MGGRAPH\0"                      8 bytes
//! version u32 (FORMAT_VERSION)
//! key     str canonical dataset dir, str split scheme, u8 symmetrize, u8 self-loop policy
//! sources u32 count, then per file: str path, u64 size, i64 mtime seconds, u32 mtime nanoseconds
//! payload str name; graph: u64 N, u8 symmetric, u8 self loops, u64 E, [u64; N+1] offsets,
//!         [u32; E] targets, [u32; N] in-degrees, [u32; N] out-degrees;
//!         features: u8 present, (u64 N, u64 dim, [f32; N*dim]); labels: u64 N, [i64; N];
//!         u64 num_classes; split: 3 x (u64 len, [u32; len])
//! check   u64 checksum64 of every byte before it
//! ```
//!
//! A `str` is a `u32` byte length followed by UTF-8 bytes.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use crate::dataset::{Dataset, NodeFeatures, Split};
use crate::graph::{Graph, GraphOptions, SelfLoops};

const MAGIC: &[u8; 8] = b"MGGRAPH\0";
const FORMAT_VERSION: u32 = 1;

/// What identifies a cache entry besides its source files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheKey {
    /// Canonical dataset folder.
    pub dir: String,
    /// The resolved split scheme.
    pub scheme: String,
    /// Graph construction options.
    pub options: GraphOptions,
}

/// Size and modification time of one source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceStamp {
    /// File path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the Unix epoch (negative before it).
    pub mtime_secs: i64,
    /// Sub-second part of the modification time.
    pub mtime_nanos: u32,
}

impl SourceStamp {
    /// Reads the size and modification time of `path`.
    pub fn of(path: &Path) -> io::Result<SourceStamp> {
        let meta = fs::metadata(path)?;
        let modified = meta.modified()?;
        let (mtime_secs, mtime_nanos) = match modified.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                (-(d.as_secs() as i64), d.subsec_nanos())
            }
        };
        Ok(SourceStamp {
            path: path.to_string_lossy().into_owned(),
            size: meta.len(),
            mtime_secs,
            mtime_nanos,
        })
    }
}

/// Why a cache file could not be used.
#[derive(Debug)]
pub(crate) enum CacheMiss {
    /// No cache file.
    Absent,
    /// The file is for other sources, or they changed since it was written.
    Stale(String),
    /// The file is damaged or of another format.
    Corrupt(String),
}

/// 64-bit non-cryptographic checksum: four independent multiply-rotate lanes over 8-byte words
/// plus FNV-1a over the tail, combined with the length. Every step is a bijection of the lane
/// state, so any change confined to one 8-byte word always changes the result.
pub(crate) fn checksum64(bytes: &[u8]) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let mut acc = [P1, P2, P1.rotate_left(17), P2.rotate_left(29)];
    let mut chunks = bytes.chunks_exact(32);
    for chunk in &mut chunks {
        for (lane, a) in acc.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&chunk[lane * 8..lane * 8 + 8]);
            *a = (*a ^ u64::from_le_bytes(w))
                .wrapping_mul(P1)
                .rotate_left(31);
        }
    }
    let mut tail = 0xcbf2_9ce4_8422_2325u64;
    for &b in chunks.remainder() {
        tail = (tail ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut h = (bytes.len() as u64).wrapping_mul(P2) ^ tail;
    for a in acc {
        h = (h ^ a).wrapping_mul(P2).rotate_left(27);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P1);
    h ^ (h >> 29)
}

/// FNV-1a 64 of the key, used in the cache file name.
fn key_hash(key: &CacheKey) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    };
    eat(key.dir.as_bytes());
    eat(key.scheme.as_bytes());
    eat(&[
        u8::from(key.options.symmetrize),
        self_loops_code(key.options.self_loops),
    ]);
    h
}

/// Path of the cache file for `key` inside `cache_dir`.
pub(crate) fn cache_path(cache_dir: &Path, key: &CacheKey) -> PathBuf {
    let base = Path::new(&key.dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".into());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(48)
            .collect()
    };
    cache_dir.join(format!(
        "ogb-{}-{}-{:016x}.mgcache",
        clean(&base),
        clean(&key.scheme),
        key_hash(key)
    ))
}

fn self_loops_code(s: SelfLoops) -> u8 {
    match s {
        SelfLoops::Keep => 0,
        SelfLoops::Remove => 1,
        SelfLoops::Add => 2,
    }
}

fn self_loops_from(code: u8) -> Option<SelfLoops> {
    match code {
        0 => Some(SelfLoops::Keep),
        1 => Some(SelfLoops::Remove),
        2 => Some(SelfLoops::Add),
        _ => None,
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn u32s(&mut self, v: &[u32]) {
        self.0.reserve(v.len() * 4);
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }
    /// `u8` symmetrize, `u8` self-loop policy.
    fn options(&mut self, o: GraphOptions) {
        self.u8(u8::from(o.symmetrize));
        self.u8(self_loops_code(o.self_loops));
    }
}

/// Encodes the full cache file.
fn encode(key: &CacheKey, sources: &[SourceStamp], ds: &Dataset) -> Vec<u8> {
    let g = &ds.graph;
    let n = g.num_nodes();
    let feat_len = ds.features.as_ref().map_or(0, |f| f.values.len());
    let mut w = Writer(Vec::with_capacity(
        256 + 8 * (n + 1) + 4 * g.num_edges() + 16 * n + 4 * feat_len,
    ));
    w.0.extend_from_slice(MAGIC);
    w.u32(FORMAT_VERSION);
    w.str(&key.dir);
    w.str(&key.scheme);
    w.options(key.options);
    w.u32(sources.len() as u32);
    for s in sources {
        w.str(&s.path);
        w.u64(s.size);
        w.u64(s.mtime_secs as u64);
        w.u32(s.mtime_nanos);
    }
    w.str(&ds.name);
    w.u64(n as u64);
    w.options(GraphOptions {
        symmetrize: g.is_symmetric(),
        self_loops: g.self_loops(),
    });
    w.u64(g.num_edges() as u64);
    for &o in g.offsets() {
        w.u64(o as u64);
    }
    w.u32s(g.targets());
    w.u32s(g.in_degrees());
    w.u32s(g.out_degrees());
    match &ds.features {
        Some(f) => {
            w.u8(1);
            w.u64(f.num_nodes as u64);
            w.u64(f.dim as u64);
            w.0.reserve(f.values.len() * 4);
            for x in &f.values {
                w.0.extend_from_slice(&x.to_le_bytes());
            }
        }
        None => w.u8(0),
    }
    w.u64(ds.labels.len() as u64);
    for &l in &ds.labels {
        w.0.extend_from_slice(&l.to_le_bytes());
    }
    w.u64(ds.num_classes as u64);
    for part in [&ds.split.train, &ds.split.valid, &ds.split.test] {
        w.u64(part.len() as u64);
        w.u32s(part);
    }
    let check = checksum64(&w.0);
    w.u64(check);
    w.0
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes the cache file atomically: a temporary file in the same folder, then a rename.
pub(crate) fn write(
    path: &Path,
    key: &CacheKey,
    sources: &[SourceStamp],
    ds: &Dataset,
) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "cache path has no folder"))?;
    fs::create_dir_all(dir)?;
    let bytes = encode(key, sources, ds);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

const TRUNCATED: &str = "truncated";

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).ok_or(TRUNCATED)?;
        let s = self.bytes.get(self.pos..end).ok_or(TRUNCATED)?;
        self.pos = end;
        Ok(s)
    }
    fn arr<const K: usize>(&mut self) -> Result<[u8; K], String> {
        let mut a = [0u8; K];
        a.copy_from_slice(self.take(K)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn len(&mut self, elem: usize) -> Result<usize, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| TRUNCATED.to_string())?;
        if n.checked_mul(elem)
            .is_none_or(|b| b > self.bytes.len() - self.pos)
        {
            return Err(TRUNCATED.into());
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "invalid UTF-8 string".to_string())
    }
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, String> {
        let b = self.take(n.checked_mul(4).ok_or(TRUNCATED)?)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    /// What [`Writer::options`] wrote.
    fn options(&mut self) -> Result<GraphOptions, String> {
        Ok(GraphOptions {
            symmetrize: self.u8()? != 0,
            self_loops: self_loops_from(self.u8()?).ok_or("bad self-loop code")?,
        })
    }
}

/// Reads a cache file, checking integrity first, then that it matches `key` and `sources`.
pub(crate) fn read(
    path: &Path,
    key: &CacheKey,
    sources: &[SourceStamp],
) -> Result<Dataset, CacheMiss> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(CacheMiss::Absent),
        Err(e) => return Err(CacheMiss::Corrupt(format!("cannot read: {e}"))),
    };
    decode(&bytes, key, sources)
}

fn decode(bytes: &[u8], key: &CacheKey, sources: &[SourceStamp]) -> Result<Dataset, CacheMiss> {
    let corrupt = CacheMiss::Corrupt;
    if bytes.len() < MAGIC.len() + 4 + 8 || &bytes[..8] != MAGIC {
        return Err(corrupt("bad magic or truncated".into()));
    }
    let mut r = Reader { bytes, pos: 8 };
    let version = r.u32().map_err(corrupt)?;
    if version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "format version {version}, expected {FORMAT_VERSION}"
        )));
    }
    let (body, check) = bytes.split_at(bytes.len() - 8);
    let mut c = [0u8; 8];
    c.copy_from_slice(check);
    if checksum64(body) != u64::from_le_bytes(c) {
        return Err(corrupt("checksum mismatch".into()));
    }
    let mut r = Reader {
        bytes: body,
        pos: 12,
    };
    let header = (|| -> Result<(CacheKey, Vec<SourceStamp>), String> {
        let dir = r.str()?;
        let scheme = r.str()?;
        let options = r.options()?;
        let count = r.u32()? as usize;
        let mut stamps = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            stamps.push(SourceStamp {
                path: r.str()?,
                size: r.u64()?,
                mtime_secs: r.u64()? as i64,
                mtime_nanos: r.u32()?,
            });
        }
        let key = CacheKey {
            dir,
            scheme,
            options,
        };
        Ok((key, stamps))
    })()
    .map_err(corrupt)?;
    if header.0 != *key {
        return Err(CacheMiss::Stale(format!(
            "written for {:?} (scheme {:?}, {:?})",
            header.0.dir, header.0.scheme, header.0.options
        )));
    }
    if header.1 != sources {
        let changed = sources
            .iter()
            .find(|s| !header.1.contains(s))
            .map(|s| s.path.clone())
            .or_else(|| {
                header
                    .1
                    .iter()
                    .find(|s| !sources.contains(s))
                    .map(|s| s.path.clone())
            })
            .unwrap_or_default();
        return Err(CacheMiss::Stale(format!("source changed: {changed}")));
    }
    decode_payload(&mut r).map_err(corrupt)
}

fn decode_payload(r: &mut Reader<'_>) -> Result<Dataset, String> {
    let name = r.str()?;
    let n = r.len(8)?;
    let options = r.options()?;
    let e = r.len(4)?;
    let offsets = r
        .u32s(2 * (n + 1))?
        .chunks_exact(2)
        .map(|w| usize::try_from(u64::from(w[0]) | (u64::from(w[1]) << 32)))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| "offset too large")?;
    let targets = r.u32s(e)?;
    let in_degrees = r.u32s(n)?;
    let out_degrees = r.u32s(n)?;
    let graph = Graph::from_parts(offsets, targets, in_degrees, out_degrees, options)?;
    let features = match r.u8()? {
        0 => None,
        1 => {
            let rows = r.len(0)?;
            let dim = r.len(0)?;
            let count = rows.checked_mul(dim).ok_or(TRUNCATED)?;
            if rows != n {
                return Err("feature rows differ from node count".into());
            }
            let values: Vec<f32> = r.u32s(count)?.into_iter().map(f32::from_bits).collect();
            Some(NodeFeatures {
                num_nodes: rows,
                dim,
                values,
            })
        }
        _ => return Err("bad feature flag".into()),
    };
    let label_count = r.len(8)?;
    if label_count != n {
        return Err("label count differs from node count".into());
    }
    let labels: Vec<i64> = r
        .take(label_count * 8)?
        .chunks_exact(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            i64::from_le_bytes(a)
        })
        .collect();
    let num_classes = usize::try_from(r.u64()?).map_err(|_| "bad class count")?;
    let mut parts = Vec::with_capacity(3);
    for _ in 0..3 {
        let len = r.len(4)?;
        let ids = r.u32s(len)?;
        if ids.iter().any(|&v| v as usize >= n) {
            return Err("split id out of range".into());
        }
        parts.push(ids);
    }
    if r.pos != r.bytes.len() {
        return Err("trailing bytes".into());
    }
    let test = parts.pop().unwrap_or_default();
    let valid = parts.pop().unwrap_or_default();
    let train = parts.pop().unwrap_or_default();
    let split = Split { train, valid, test };
    let dataset = Dataset::from_labels(name, graph, features, labels, split);
    if dataset.num_classes != num_classes {
        return Err("class count differs from the labels".into());
    }
    Ok(dataset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_detects_single_byte_flips() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let base = checksum64(&data);
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0x10;
            assert_ne!(checksum64(&d), base, "flip at {i} undetected");
        }
        assert_ne!(checksum64(&data[..999]), base);
    }

    #[test]
    fn key_changes_the_file_name() {
        let a = CacheKey {
            dir: "/data/cora".into(),
            scheme: "public".into(),
            options: GraphOptions::default(),
        };
        let mut b = a.clone();
        b.options.symmetrize = false;
        let mut c = a.clone();
        c.scheme = "other".into();
        let dir = Path::new("/tmp");
        assert_ne!(cache_path(dir, &a), cache_path(dir, &b));
        assert_ne!(cache_path(dir, &a), cache_path(dir, &c));
        assert!(
            cache_path(dir, &a)
                .to_string_lossy()
                .contains("ogb-cora-public-")
        );
    }
}

//! Fast line-oriented reading of gzip-or-plain CSV files: block reading and parallel per-line
//! parsing with exact 1-based line numbers (the fields of a line: [`super::fields`]).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use flate2::read::MultiGzDecoder;
use rayon::prelude::*;

use crate::error::LoadError;

/// Bytes read per block; blocks are parsed in parallel pieces.
const BLOCK_SIZE: usize = 8 << 20;
/// Blocks smaller than this are parsed as one piece.
const PARALLEL_MIN: usize = 256 << 10;

/// Reports reading progress of one file: `progress(read, total)`, bytes of the file on disk
/// (compressed bytes for `.gz`) read so far and the file's size.
pub(crate) type ByteProgress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// A reader that adds the bytes it reads to a shared counter.
struct Counting<R> {
    inner: R,
    counter: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A data file, compressed (`.gz`) or plain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceFile {
    /// Path of the file found.
    pub path: PathBuf,
    /// Whether it is gzip-compressed.
    pub gz: bool,
}

impl SourceFile {
    /// Finds `<plain>.gz`, else `<plain>`; `None` when neither exists.
    pub fn find(plain: &Path) -> Option<SourceFile> {
        let mut gz_name = plain.as_os_str().to_owned();
        gz_name.push(".gz");
        let gz = PathBuf::from(gz_name);
        if gz.is_file() {
            Some(SourceFile { path: gz, gz: true })
        } else if plain.is_file() {
            Some(SourceFile {
                path: plain.to_path_buf(),
                gz: false,
            })
        } else {
            None
        }
    }

    /// Like [`SourceFile::find`], but a missing file is a [`LoadError::MissingFile`] naming the
    /// `.gz` path.
    pub fn require(plain: &Path) -> Result<SourceFile, LoadError> {
        Self::find(plain).ok_or_else(|| {
            let mut gz_name = plain.as_os_str().to_owned();
            gz_name.push(".gz");
            LoadError::MissingFile {
                path: PathBuf::from(gz_name),
            }
        })
    }

    fn read_error(&self, source: io::Error) -> LoadError {
        if self.gz {
            LoadError::Gzip {
                path: self.path.clone(),
                source,
            }
        } else {
            LoadError::Io {
                path: self.path.clone(),
                source,
            }
        }
    }

    /// Opens the file, checking the gzip magic of compressed files; bytes read from disk are
    /// added to `counter`.
    fn open(&self, counter: Arc<AtomicU64>) -> Result<Box<dyn Read + Send>, LoadError> {
        let io_err = |source| LoadError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = File::open(&self.path).map_err(io_err)?;
        if !self.gz {
            return Ok(Box::new(Counting {
                inner: file,
                counter,
            }));
        }
        let mut magic = [0u8; 2];
        let mut got = 0;
        while got < 2 {
            match file.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        if got < 2 || magic != [0x1f, 0x8b] {
            return Err(self.read_error(io::Error::new(
                io::ErrorKind::InvalidData,
                "missing gzip magic bytes 1f 8b",
            )));
        }
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        Ok(Box::new(MultiGzDecoder::new(BufReader::with_capacity(
            1 << 20,
            Counting {
                inner: file,
                counter,
            },
        ))))
    }

    /// Reads the file in blocks of whole lines, calling `f(block, first_line)` for each; the
    /// last line may lack its newline. Reading (and decompressing) runs on its own thread, one
    /// block ahead of `f`.
    pub fn for_each_block(
        &self,
        f: impl FnMut(&[u8], u64) -> Result<(), LoadError>,
    ) -> Result<(), LoadError> {
        self.for_each_block_sized(BLOCK_SIZE, None, f)
    }

    /// [`SourceFile::for_each_block`], calling `progress` after each block.
    pub fn for_each_block_with_progress(
        &self,
        progress: ByteProgress<'_>,
        f: impl FnMut(&[u8], u64) -> Result<(), LoadError>,
    ) -> Result<(), LoadError> {
        self.for_each_block_sized(BLOCK_SIZE, Some(progress), f)
    }

    /// [`SourceFile::for_each_block`] with blocks of about `block_size` bytes, calling
    /// `progress` (if any) after each block.
    fn for_each_block_sized(
        &self,
        block_size: usize,
        progress: Option<ByteProgress<'_>>,
        mut f: impl FnMut(&[u8], u64) -> Result<(), LoadError>,
    ) -> Result<(), LoadError> {
        let counter = Arc::new(AtomicU64::new(0));
        let total = match progress {
            Some(_) => std::fs::metadata(&self.path).map_or(0, |m| m.len()),
            None => 0,
        };
        let reader = self.open(Arc::clone(&counter))?;
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::sync_channel(1);
            let (recycle_tx, recycle_rx) = mpsc::channel();
            scope.spawn(move || self.produce_blocks(reader, block_size.max(1), &tx, &recycle_rx));
            for message in rx {
                let (block, first_line): (Vec<u8>, u64) = message?;
                f(&block, first_line)?;
                if let Some(progress) = progress {
                    progress(counter.load(Ordering::Relaxed).min(total), total);
                }
                // The producer may be gone already; the buffer is then simply dropped.
                let _ = recycle_tx.send(block);
            }
            Ok(())
        })
    }

    /// Reads blocks of whole lines and sends them with their first line number; stops at the
    /// end of the file, on a read error (sent on), or when the receiver is gone.
    fn produce_blocks(
        &self,
        mut reader: Box<dyn Read + Send>,
        block_size: usize,
        tx: &mpsc::SyncSender<Result<(Vec<u8>, u64), LoadError>>,
        recycle: &mpsc::Receiver<Vec<u8>>,
    ) {
        let mut buf = vec![0u8; block_size];
        let mut len = 0usize;
        let mut line = 1u64;
        loop {
            let mut eof = false;
            while len < buf.len() {
                match reader.read(&mut buf[len..]) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => len += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(self.read_error(e)));
                        return;
                    }
                }
            }
            if eof {
                if len > 0 {
                    buf.truncate(len);
                    let _ = tx.send(Ok((buf, line)));
                }
                return;
            }
            let Some(last) = buf[..len].iter().rposition(|&b| b == b'\n') else {
                // One line longer than the buffer: grow it.
                buf.resize(buf.len() * 2, 0);
                continue;
            };
            let mut next = recycle.try_recv().unwrap_or_default();
            next.clear();
            next.resize(block_size.max(len - last - 1), 0);
            next[..len - last - 1].copy_from_slice(&buf[last + 1..len]);
            let carried = len - last - 1;
            buf.truncate(last + 1);
            let lines_in_block = count_newlines(&buf);
            if tx.send(Ok((buf, line))).is_err() {
                return;
            }
            line += lines_in_block;
            buf = next;
            len = carried;
        }
    }
}

/// Number of `\n` bytes.
pub(crate) fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Lines of a block (without `\n` or a trailing `\r`); a final newline does not start a line.
pub(crate) fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = block.strip_suffix(b"\n").unwrap_or(block);
    let empty = block.is_empty();
    body.split(|&b| b == b'\n')
        .filter(move |_| !empty)
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// Whether a line is empty or only whitespace.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Splits a block into about `n` pieces that each end at a line boundary.
fn pieces(block: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(n);
    let target = block.len().div_ceil(n.max(1)).max(1);
    let mut start = 0;
    while start < block.len() {
        let mut end = (start + target).min(block.len());
        if end < block.len() {
            match block[end..].iter().position(|&b| b == b'\n') {
                Some(p) => end += p + 1,
                None => end = block.len(),
            }
        }
        out.push(&block[start..end]);
        start = end;
    }
    out
}

/// Tracks blank lines: they are allowed only after the last non-blank line of a file.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BlankLines {
    first_blank: Option<u64>,
    last_content: Option<u64>,
    content_lines: u64,
}

impl BlankLines {
    fn merge(&mut self, other: BlankLines) {
        self.first_blank = match (self.first_blank, other.first_blank) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_content = self.last_content.max(other.last_content);
        self.content_lines += other.content_lines;
    }

    /// Number of non-blank lines seen.
    pub fn content_lines(&self) -> u64 {
        self.content_lines
    }

    /// Errors with [`LoadError::EmptyLine`] if a blank line precedes a non-blank one.
    pub fn check(&self, path: &Path) -> Result<(), LoadError> {
        match (self.first_blank, self.last_content) {
            (Some(blank), Some(content)) if blank < content => Err(LoadError::EmptyLine {
                path: path.to_path_buf(),
                line: blank,
            }),
            _ => Ok(()),
        }
    }
}

/// Parses every non-blank line of `block` (whose first line is `first_line`) with
/// `parse(line_bytes, line_number, out)`, in parallel pieces for large blocks, appending to `out`
/// in file order. Returns the first error in file order.
pub(crate) fn parse_block<T: Send>(
    block: &[u8],
    first_line: u64,
    out: &mut Vec<T>,
    blanks: &mut BlankLines,
    parse: impl Fn(&[u8], u64, &mut Vec<T>) -> Result<(), LoadError> + Sync,
) -> Result<(), LoadError> {
    let parse_piece = |piece: &[u8], first: u64, out: &mut Vec<T>| {
        let mut b = BlankLines::default();
        for (i, line) in lines(piece).enumerate() {
            let number = first + i as u64;
            if is_blank(line) {
                b.first_blank.get_or_insert(number);
            } else {
                b.last_content = Some(number);
                b.content_lines += 1;
                parse(line, number, out)?;
            }
        }
        Ok::<_, LoadError>(b)
    };
    if block.len() < PARALLEL_MIN {
        let b = parse_piece(block, first_line, out)?;
        blanks.merge(b);
        return Ok(());
    }
    let parts = pieces(block, 4 * rayon::current_num_threads());
    let counts: Vec<u64> = parts.par_iter().map(|p| count_newlines(p)).collect();
    let mut starts = Vec::with_capacity(parts.len());
    let mut line = first_line;
    for c in &counts {
        starts.push(line);
        line += c;
    }
    let results: Vec<Result<(Vec<T>, BlankLines), LoadError>> = parts
        .par_iter()
        .zip(starts.par_iter())
        .map(|(piece, &start)| {
            let mut local = Vec::new();
            parse_piece(piece, start, &mut local).map(|b| (local, b))
        })
        .collect();
    for r in results {
        let (mut local, b) = r?;
        out.append(&mut local);
        blanks.merge(b);
    }
    Ok(())
}

/// Parses every line of a file with `parse`, returning the values and the number of non-blank
/// lines. Blank lines are allowed only at the end.
pub(crate) fn parse_file<T: Send>(
    src: &SourceFile,
    parse: impl Fn(&[u8], u64, &mut Vec<T>) -> Result<(), LoadError> + Sync,
) -> Result<(Vec<T>, u64), LoadError> {
    parse_file_with_progress(src, &|_, _| {}, parse)
}

/// [`parse_file`], calling `progress` after each block (see [`ByteProgress`]).
pub(crate) fn parse_file_with_progress<T: Send>(
    src: &SourceFile,
    progress: ByteProgress<'_>,
    parse: impl Fn(&[u8], u64, &mut Vec<T>) -> Result<(), LoadError> + Sync,
) -> Result<(Vec<T>, u64), LoadError> {
    let mut out = Vec::new();
    let mut blanks = BlankLines::default();
    src.for_each_block_with_progress(progress, |block, first| {
        parse_block(block, first, &mut out, &mut blanks, &parse)
    })?;
    blanks.check(&src.path)?;
    Ok((out, blanks.content_lines()))
}

#[cfg(test)]
mod tests;

use super::*;
use crate::ogb::fields::parse_u64;

#[test]
fn progress_counts_file_bytes_up_to_the_size() {
    use std::io::Write as _;
    use std::sync::Mutex;
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..20_000).map(|i| format!("{i},{}\n", i * 7)).collect();
    let plain = dir.path().join("e.csv");
    std::fs::write(&plain, &text).unwrap();
    let gz = dir.path().join("e.csv.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(text.as_bytes()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    for src in [
        SourceFile {
            path: plain,
            gz: false,
        },
        SourceFile { path: gz, gz: true },
    ] {
        let size = std::fs::metadata(&src.path).unwrap().len();
        let reports = Mutex::new(Vec::new());
        let (values, rows) = parse_file_with_progress(
            &src,
            &|read, total| reports.lock().unwrap().push((read, total)),
            |line, _, out: &mut Vec<usize>| {
                out.push(line.len());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((values.len(), rows), (20_000, 20_000));
        let reports = reports.into_inner().unwrap();
        assert!(!reports.is_empty());
        assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0), "{reports:?}");
        assert!(reports.iter().all(|&(_, t)| t == size));
        assert_eq!(reports.last(), Some(&(size, size)), "gz {}", src.gz);
    }
}

#[test]
fn blocks_hold_whole_lines_with_correct_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.csv");
    let mut text = String::new();
    for i in 0..300 {
        // Varying lengths, one line longer than the smallest buffers.
        text.push_str(&"x".repeat(i % 37));
        text.push_str(&format!("{i}\n"));
    }
    text.push_str("last-without-newline");
    std::fs::write(&path, &text).unwrap();
    let src = SourceFile { path, gz: false };
    for size in [1, 7, 16, 64, 1000, 1 << 20] {
        let mut seen = Vec::new();
        src.for_each_block_sized(size, None, |block, first| {
            for (i, line) in lines(block).enumerate() {
                seen.push((first + i as u64, String::from_utf8(line.to_vec()).unwrap()));
            }
            Ok(())
        })
        .unwrap();
        let expected: Vec<(u64, String)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, l.to_string()))
            .collect();
        assert_eq!(seen, expected, "block size {size}");
    }
}

#[test]
fn line_splitting() {
    let v: Vec<&[u8]> = lines(b"a\r\nb\n\nc").collect();
    assert_eq!(v, vec![&b"a"[..], b"b", b"", b"c"]);
    assert_eq!(lines(b"a\n").count(), 1);
    assert_eq!(lines(b"").count(), 0);
    assert_eq!(lines(b"\n").count(), 1);
}

#[test]
fn pieces_end_on_lines() {
    let block = b"11\n22\n33\n44\n55\n";
    for n in 1..8 {
        let p = pieces(block, n);
        assert_eq!(p.concat(), block.to_vec());
        for piece in &p {
            assert!(piece.ends_with(b"\n"));
        }
    }
}

#[test]
fn parallel_parse_matches_sequential_and_reports_first_error() {
    let mut text = String::new();
    for i in 0..200_000u32 {
        text.push_str(&format!("{i}\n"));
    }
    let mut out = Vec::new();
    let mut blanks = BlankLines::default();
    parse_block(
        text.as_bytes(),
        1,
        &mut out,
        &mut blanks,
        |l, n, o: &mut Vec<(u64, u64)>| {
            o.push((parse_u64(l).unwrap_or(u64::MAX), n));
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(out.len(), 200_000);
    assert!(
        out.iter()
            .enumerate()
            .all(|(i, &(v, n))| v == i as u64 && n == i as u64 + 1)
    );
    assert_eq!(blanks.content_lines(), 200_000);

    let text = text
        .replacen("150000\n", "x\n", 1)
        .replacen("170000\n", "y\n", 1);
    let err = parse_block(
        text.as_bytes(),
        1,
        &mut Vec::<u32>::new(),
        &mut BlankLines::default(),
        |l, n, _| {
            parse_u64(l).map(|_| ()).ok_or(LoadError::EmptyLine {
                path: PathBuf::from("t"),
                line: n,
            })
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, LoadError::EmptyLine { line: 150_001, .. }),
        "{err:?}"
    );
}

use super::*;

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
fn integers() {
    assert_eq!(parse_u64(b" 42 "), Some(42));
    assert_eq!(parse_u64(b"+7"), Some(7));
    assert_eq!(parse_u64(b""), None);
    assert_eq!(parse_u64(b"-1"), None);
    assert_eq!(parse_u64(b"1.0"), None);
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_i64(b"-1"), Some(-1));
    assert_eq!(parse_i64(b"-+1"), None);
    assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(parse_i64(b"9223372036854775808"), None);
    assert_eq!(parse_i64(b"x"), None);
}

#[test]
fn fast_float_path_matches_std_bit_for_bit() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut texts: Vec<String> = vec![
        "0".into(),
        "-0".into(),
        "0.0".into(),
        "-0.000".into(),
        "1".into(),
        "+2.5".into(),
        "1e5".into(),
        "1E-5".into(),
        "-3.25e+2".into(),
        "9999999".into(),
        "16777217".into(),
        ".5".into(),
        "5.".into(),
        "0.1".into(),
        "0.3".into(),
        "1234.567".into(),
        "1e10".into(),
        "7e-10".into(),
        "1e-11".into(),
        "00012.5000".into(),
        "123456789".into(),
    ];
    for _ in 0..20_000 {
        let x: f32 = rng.random::<f32>() * 2.0 - 1.0;
        let precision = rng.random_range(0..9);
        texts.push(format!("{x:.precision$}"));
        texts.push(format!("{:.3e}", x * 1000.0));
    }
    for t in &texts {
        let std = t.parse::<f32>().ok();
        let ours = parse_f32(t.as_bytes());
        assert_eq!(ours.map(f32::to_bits), std.map(f32::to_bits), "{t}");
    }
    for bad in [
        "", "-", ".", "1..2", "1e", "e5", "1e5x", "--1", "1-2", "0x10",
    ] {
        assert_eq!(parse_f32(bad.as_bytes()), None, "{bad:?}");
    }
}

#[test]
fn floats() {
    assert_eq!(parse_f32(b"0"), Some(0.0));
    assert_eq!(parse_f32(b"1234567"), Some(1234567.0));
    assert_eq!(parse_f32(b"-0.5e1"), Some(-5.0));
    assert_eq!(parse_f32(b" 0.25\t"), Some(0.25));
    assert!(parse_f32(b"nan").is_some_and(f32::is_nan));
    assert_eq!(parse_f32(b"abc"), None);
    assert_eq!(parse_f32(b""), None);
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

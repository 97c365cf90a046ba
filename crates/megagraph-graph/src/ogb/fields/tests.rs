use super::*;

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

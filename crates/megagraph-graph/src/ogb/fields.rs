//! Parsing the fields of one CSV line: byte-level integers and floats (with an exact fast path
//! for `f32`), node ids, field counts, and field text for error messages.

use std::path::Path;

use crate::error::LoadError;

/// Trims ASCII whitespace at both ends.
pub(crate) fn trim(field: &[u8]) -> &[u8] {
    field.trim_ascii()
}

/// Field text for error messages: lossy UTF-8, at most 64 bytes.
pub(crate) fn show(field: &[u8]) -> String {
    let f = &field[..field.len().min(64)];
    String::from_utf8_lossy(f).into_owned()
}

/// Parses a non-negative decimal integer (surrounding whitespace allowed).
pub(crate) fn parse_u64(field: &[u8]) -> Option<u64> {
    let f = trim(field);
    let f = f.strip_prefix(b"+").unwrap_or(f);
    if f.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in f {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Parses a decimal integer with an optional sign (surrounding whitespace allowed).
pub(crate) fn parse_i64(field: &[u8]) -> Option<i64> {
    let f = trim(field);
    match f.strip_prefix(b"-") {
        Some(rest) => {
            let v = parse_u64(rest)?;
            if rest.first() == Some(&b'+') {
                return None;
            }
            0i64.checked_sub_unsigned(v)
        }
        None => i64::try_from(parse_u64(f)?).ok(),
    }
}

/// Exact powers of ten in `f32` (10^0 ..= 10^10).
const POW10_F32: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// Parses a float (Rust `f32` syntax, surrounding whitespace allowed); may return NaN/inf.
///
/// Plain decimals with at most 7 significant digits and small exponents (the usual CSV
/// formats) take an exact fast path: the integer mantissa (< 2^24) and the power of ten are
/// both exact in `f32`, so one IEEE multiply or divide rounds correctly, giving the same bits
/// as `str::parse`. Everything else goes to `str::parse::<f32>`.
pub(crate) fn parse_f32(field: &[u8]) -> Option<f32> {
    let f = trim(field);
    fast_f32(f).or_else(|| std::str::from_utf8(f).ok()?.parse::<f32>().ok())
}

/// The exact fast path of [`parse_f32`]; `None` means "use the general parser".
fn fast_f32(f: &[u8]) -> Option<f32> {
    let (negative, body) = match f.first()? {
        b'-' => (true, &f[1..]),
        b'+' => (false, &f[1..]),
        _ => (false, f),
    };
    let mut mantissa: u32 = 0;
    let mut significant = 0u32;
    let mut exponent: i32 = 0;
    let mut digits = 0usize;
    let mut i = 0;
    let mut seen_dot = false;
    while i < body.len() {
        let b = body[i];
        if b.is_ascii_digit() {
            digits += 1;
            if mantissa != 0 || b != b'0' {
                significant += 1;
                if significant > 7 {
                    return None;
                }
                mantissa = mantissa * 10 + u32::from(b - b'0');
            }
            if seen_dot {
                exponent -= 1;
            }
        } else if b == b'.' && !seen_dot {
            seen_dot = true;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if i < body.len() {
        if body[i] != b'e' && body[i] != b'E' {
            return None;
        }
        let exp = parse_i64(&body[i + 1..]).filter(|e| e.abs() <= 40)?;
        if body[i + 1..]
            .iter()
            .any(|b| !(b.is_ascii_digit() || *b == b'-' || *b == b'+'))
        {
            return None;
        }
        exponent += exp as i32;
    }
    let m = mantissa as f32;
    let value = if mantissa == 0 {
        0.0
    } else if (0..=10).contains(&exponent) {
        m * POW10_F32[exponent as usize]
    } else if (-10..0).contains(&exponent) {
        m / POW10_F32[(-exponent) as usize]
    } else {
        return None;
    };
    Some(if negative { -value } else { value })
}

/// Number of comma-separated fields of a line.
pub(crate) fn field_count(line: &[u8]) -> usize {
    line.iter().filter(|&&b| b == b',').count() + 1
}

/// Checks that line `number` of `path` holds exactly one field.
///
/// # Errors
/// [`LoadError::FieldCount`] otherwise.
pub(crate) fn expect_one_field(path: &Path, line: &[u8], number: u64) -> Result<(), LoadError> {
    let fields = field_count(line);
    if fields != 1 {
        return Err(LoadError::FieldCount {
            path: path.to_path_buf(),
            line: number,
            expected: 1,
            found: fields,
        });
    }
    Ok(())
}

/// Parses a line that must hold exactly one node id `< num_nodes`.
pub(crate) fn parse_node_line(
    path: &Path,
    line: &[u8],
    number: u64,
    num_nodes: usize,
) -> Result<u32, LoadError> {
    expect_one_field(path, line, number)?;
    parse_node_field(path, line, number, 1, num_nodes)
}

/// Parses one field as a node id `< num_nodes`.
pub(crate) fn parse_node_field(
    path: &Path,
    field: &[u8],
    line: u64,
    index: usize,
    num_nodes: usize,
) -> Result<u32, LoadError> {
    let node = parse_u64(field).ok_or_else(|| LoadError::Parse {
        path: path.to_path_buf(),
        line,
        field: index,
        value: show(field),
        expected: "a non-negative integer node id",
    })?;
    if node >= num_nodes as u64 {
        return Err(LoadError::NodeOutOfRange {
            path: path.to_path_buf(),
            line,
            field: index,
            node,
            num_nodes,
        });
    }
    Ok(node as u32)
}

#[cfg(test)]
mod tests;

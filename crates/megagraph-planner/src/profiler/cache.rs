//! The measured-profile cache: one JSON file per (backend, device, model shape, element size)
//! key, ladder and concurrency, under the megagraph cache folder.

use crate::profile::{ProfileKey, ProfileTable, ProfiledPart};
use crate::profiler::{MeasureError, ProfilerOptions};
use std::path::{Path, PathBuf};

/// Where [`cached_profile`]'s table came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Read from the cache.
    Hit,
    /// Measured: there was no cache file, or a refresh was asked for.
    Measured,
    /// Measured again because the cache file could not be used (the reason).
    Remeasured(String),
}

/// 64-bit FNV-1a of `bytes`: a stable digest for file names.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The cache file of `key` measured with `options` under `dir`:
/// `dir/profile_<cache key>_c<concurrency>_<ladder digest>.json`.
pub fn measured_cache_path(dir: impl AsRef<Path>, key: &ProfileKey, options: &ProfilerOptions) -> PathBuf {
    let ladder = format!("{:?}", crate::profiler::jobs(&options.ladder));
    dir.as_ref().join(format!(
        "profile_{}_c{}_{:016x}.json",
        key.cache_key(),
        options.concurrency,
        fnv1a(ladder.as_bytes())
    ))
}

/// Why a cached table cannot stand for `key` measured at `options`' ladder, if it cannot.
fn unusable(table: &ProfileTable, key: &ProfileKey, options: &ProfilerOptions) -> Option<String> {
    if table.key != *key {
        return Some(format!(
            "it holds key {} instead of {}",
            table.key.cache_key(),
            key.cache_key()
        ));
    }
    if table.analytic {
        return Some("it holds an analytic estimate, not a measurement".into());
    }
    let wanted = crate::profiler::jobs(&options.ladder);
    let have: Vec<(ProfiledPart, usize, usize)> = ProfiledPart::ALL
        .into_iter()
        .flat_map(|part| table.samples(part).iter().map(move |s| (part, s.batch, s.size)))
        .collect();
    if have != wanted {
        return Some("its sizes are not the requested ladder's".into());
    }
    None
}

/// The measured profile of `key` at `options` from the cache under `dir`, or, when there is
/// none, it cannot be used (unreadable, corrupt, another key or ladder: logged as a warning), or
/// `refresh` is set, the result of `measure`, which is then cached (written atomically).
///
/// Returns the table, its cache file and where it came from.
///
/// # Errors
///
/// `measure`'s error, or [`MeasureError::Profile`] when the cache file cannot be written.
pub fn cached_profile(
    dir: impl AsRef<Path>,
    key: &ProfileKey,
    options: &ProfilerOptions,
    refresh: bool,
    measure: impl FnOnce() -> Result<ProfileTable, MeasureError>,
) -> Result<(ProfileTable, PathBuf, CacheStatus), MeasureError> {
    let path = measured_cache_path(dir, key, options);
    let status = if refresh || !path.exists() {
        CacheStatus::Measured
    } else {
        match ProfileTable::load(&path) {
            Ok(table) => match unusable(&table, key, options) {
                None => {
                    log::info!("measured profile read from {}", path.display());
                    return Ok((table, path, CacheStatus::Hit));
                }
                Some(reason) => CacheStatus::Remeasured(reason),
            },
            Err(error) => CacheStatus::Remeasured(error.to_string()),
        }
    };
    if let CacheStatus::Remeasured(reason) = &status {
        log::warn!(
            "cached profile {} cannot be used ({reason}); measuring again",
            path.display()
        );
    }
    let table = measure()?;
    table.save(&path)?;
    Ok((table, path, status))
}

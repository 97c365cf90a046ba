//! The measured-profile cache: one JSON file per (backend, device, model shape, element size)
//! key, ladder and concurrency, under the megagraph cache folder.

use super::options::{MeasureError, ProfilerOptions};
use megagraph_planner::{ProfileKey, ProfileTable, ProfiledPart};
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

/// Version of how parts are measured: part of every cache digest, bumped when a change to the
/// profiler or to a measured op makes earlier measurements wrong (2: attention inputs in the
/// layer's strided layout; 3: the other copies stay busy while the first is measured; 4: the
/// reference attention op folds the key mask into its matmul; 5: it runs the batch in chunks
/// whose tiles fit the caches; 6: the copies run in lockstep, starting every pass together,
/// and the ladder is measured pass after pass; 7: every timed run is repeated by the first
/// copy alone, for the solo ratios).
const MEASUREMENT_METHOD: u32 = 7;

/// The cache file of `key` measured with `options` under `dir`:
/// `dir/profile_<cache key>_c<concurrency>_<digest>.json`, the digest covering the measurement
/// method, the ladder, the cache eviction and the threads each copy runs on.
pub fn measured_cache_path(
    dir: impl AsRef<Path>,
    key: &ProfileKey,
    options: &ProfilerOptions,
) -> PathBuf {
    let ladder = format!(
        "method {MEASUREMENT_METHOD}/{:?}/evict {}/threads {}",
        super::options::ladder_points(&options.ladder),
        options.evict_bytes,
        megagraph_parallel::threads::default_threads_per_rank(options.concurrency)
    );
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
    let wanted = super::options::ladder_points(&options.ladder);
    let have: Vec<(ProfiledPart, usize, usize)> = ProfiledPart::ALL
        .into_iter()
        .flat_map(|part| {
            table
                .samples(part)
                .iter()
                .map(move |s| (part, s.batch, s.size))
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use megagraph_planner::ComputeHints;
    use megagraph_planner::ModelShape;
    use megagraph_planner::{ProfileLadder, analytic_profile};

    /// A stand-in for a measurement: an analytic table under a measured key.
    fn fake_measurement(key: &ProfileKey, options: &ProfilerOptions) -> ProfileTable {
        let hints = ComputeHints {
            peak_flops: 1e11,
            memory_bandwidth_bytes_per_second: 1e10,
            efficiency: 0.5,
            kernel_launch_seconds: 1e-6,
        };
        let mut table =
            analytic_profile(&hints, "cpu", &ModelShape::paper(), 4, &options.ladder).unwrap();
        table.key = key.clone();
        table.analytic = false;
        table
    }

    fn options(rows: Vec<usize>) -> ProfilerOptions {
        ProfilerOptions {
            ladder: ProfileLadder {
                rows,
                blocks: vec![32, 64],
                ..ProfileLadder::default()
            },
            ..ProfilerOptions::default()
        }
    }

    #[test]
    fn caches_round_trip_and_corrupt_files_are_measured_again() {
        let dir = tempfile::tempdir().unwrap();
        let key = ProfileKey::new("flex", "cpu worker", &ModelShape::paper(), 4);
        let options = options(vec![64, 128, 256]);
        let measured = std::cell::Cell::new(0);
        let measure = || {
            measured.set(measured.get() + 1);
            Ok(fake_measurement(&key, &options))
        };
        let (first, path, status) =
            cached_profile(dir.path(), &key, &options, false, measure).unwrap();
        assert_eq!(status, CacheStatus::Measured);
        assert!(path.exists());
        let (second, _, status) =
            cached_profile(dir.path(), &key, &options, false, measure).unwrap();
        assert_eq!((status, &second), (CacheStatus::Hit, &first));
        assert_eq!(measured.get(), 1);
        // refresh measures even with a good cache
        let (_, _, status) = cached_profile(dir.path(), &key, &options, true, measure).unwrap();
        assert_eq!((status, measured.get()), (CacheStatus::Measured, 2));
        // a truncated file (e.g. a crash elsewhere) is measured again and replaced
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        let (third, _, status) =
            cached_profile(dir.path(), &key, &options, false, measure).unwrap();
        assert!(
            matches!(status, CacheStatus::Remeasured(ref reason) if reason.contains("line")),
            "{status:?}"
        );
        assert_eq!((measured.get(), &third), (3, &first));
        assert!(ProfileTable::load(&path).is_ok());
        // a file holding another key is not used either
        let mut other = first.clone();
        other.key.device = "elsewhere".into();
        other.save(&path).unwrap();
        let (_, _, status) = cached_profile(dir.path(), &key, &options, false, measure).unwrap();
        assert!(
            matches!(status, CacheStatus::Remeasured(ref reason) if reason.contains("key")),
            "{status:?}"
        );
        // another ladder or concurrency is another cache entry
        let longer = self::options(vec![64, 128, 256, 512]);
        assert_ne!(measured_cache_path(dir.path(), &key, &longer), path);
        let doubled = ProfilerOptions {
            concurrency: 2,
            ..options.clone()
        };
        assert_ne!(measured_cache_path(dir.path(), &key, &doubled), path);
        // no temporary files are left behind
        let leftovers = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
    }

    #[test]
    fn a_failed_measurement_is_reported_and_nothing_is_cached() {
        let dir = tempfile::tempdir().unwrap();
        let key = ProfileKey::new("flex", "cpu", &ModelShape::paper(), 4);
        let options = options(vec![64, 128]);
        let result = cached_profile(dir.path(), &key, &options, false, || {
            Err(MeasureError::ZeroOption { field: "repeats" })
        });
        assert!(matches!(
            result,
            Err(MeasureError::ZeroOption { field: "repeats" })
        ));
        assert!(!measured_cache_path(dir.path(), &key, &options).exists());
    }
}

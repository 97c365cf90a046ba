//! Training curves as SVG charts (`megagraph train --plot DIR`).

use std::path::{Path, PathBuf};

use crate::error::{Result, TrainError};
use crate::metrics::TrainReport;
use crate::plot::{Chart, Series, SeriesStyle};

/// Writes the curves of `report`'s per-epoch history into `dir` (created when missing):
/// `loss.svg` (mean training loss and validation loss per epoch) and `accuracy.svg` (train, valid and test accuracy
/// per epoch). Returns the paths written.
///
/// # Errors
///
/// [`TrainError::Output`] naming the directory or file that could not be written.
pub fn write_training_curves(report: &TrainReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| TrainError::Output {
        path: dir.to_path_buf(),
        source,
    })?;
    let per_epoch = |value: fn(&crate::EpochMetrics) -> f64| -> Vec<(f64, f64)> {
        report.history.iter().map(|m| (m.epoch as f64, value(m))).collect()
    };
    let title = |what: &str| format!("{what}: {}", report.dataset);
    let loss = Chart::new(title("loss"), "epoch", "cross-entropy")
        .with_series(Series::new("train loss", per_epoch(|m| m.loss), SeriesStyle::Line))
        .with_series(Series::new("valid loss", per_epoch(|m| m.valid_loss), SeriesStyle::Line));
    let accuracy = Chart::new(title("accuracy"), "epoch", "accuracy")
        .with_series(Series::new("train", per_epoch(|m| m.train_accuracy), SeriesStyle::Line))
        .with_series(Series::new("valid", per_epoch(|m| m.valid_accuracy), SeriesStyle::Line))
        .with_series(Series::new("test", per_epoch(|m| m.test_accuracy), SeriesStyle::Line));
    let mut written = Vec::new();
    for (name, chart) in [("loss.svg", loss), ("accuracy.svg", accuracy)] {
        let path = dir.join(name);
        chart.write(&path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EpochMetrics;

    #[test]
    fn writes_one_point_per_epoch_into_each_chart() {
        let history: Vec<EpochMetrics> = (1..=4)
            .map(|epoch| EpochMetrics {
                epoch,
                loss: 2.0 / epoch as f64,
                train_accuracy: 0.5 + 0.1 * epoch as f64,
                valid_accuracy: 0.4 + 0.1 * epoch as f64,
                valid_loss: 1.5 / epoch as f64,
                test_accuracy: 0.45 + 0.1 * epoch as f64,
                seconds: 1.0,
                learning_rate: 1e-3,
            })
            .collect();
        let report = TrainReport {
            dataset: "toy".into(),
            history,
            ..TrainReport::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("plots");
        let written = write_training_curves(&report, &out).unwrap();
        assert_eq!(written, vec![out.join("loss.svg"), out.join("accuracy.svg")]);
        let loss = std::fs::read_to_string(&written[0]).unwrap();
        let accuracy = std::fs::read_to_string(&written[1]).unwrap();
        assert!(loss.starts_with("<svg") && loss.contains("train loss") && loss.contains("valid loss"));
        for name in ["train", "valid", "test"] {
            assert!(accuracy.contains(name), "{name} missing");
        }
    }

    #[test]
    fn an_unwritable_directory_is_named_in_the_error() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = write_training_curves(&TrainReport::default(), &file.path().join("sub")).unwrap_err();
        assert!(matches!(&err, TrainError::Output { path, .. } if path.starts_with(file.path())), "{err}");
    }
}

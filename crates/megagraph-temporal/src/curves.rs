//! A run's curves as SVG charts (`megagraph temporal train --plot DIR`).

use std::path::{Path, PathBuf};

use megagraph_train::plot::{Chart, Series, SeriesStyle};

use crate::error::Result;
use crate::report::{TemporalEpoch, TemporalReport};

/// Writes `loss.svg` (mean training loss per epoch) and `ap.svg` (validation AP and AUC per
/// epoch) of `report` into `dir` (created when missing); returns the paths written.
pub fn write_temporal_curves(report: &TemporalReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| megagraph_train::TrainError::Output {
        path: dir.to_path_buf(),
        source,
    })?;
    let per_epoch = |value: fn(&TemporalEpoch) -> f64| -> Vec<(f64, f64)> {
        report.history.iter().map(|e| (e.epoch as f64, value(e))).collect()
    };
    let title = |what: &str| format!("{what}: {} on {}", report.model, report.dataset);
    let loss = Chart::new(title("training loss"), "epoch", "binary cross-entropy")
        .with_series(Series::new("train loss", per_epoch(|e| e.loss), SeriesStyle::Line));
    let ap = Chart::new(title("validation"), "epoch", "score")
        .with_series(Series::new("valid AP", per_epoch(|e| e.valid_ap), SeriesStyle::Line))
        .with_series(Series::new("valid AUC", per_epoch(|e| e.valid_auc), SeriesStyle::Line));
    let mut written = Vec::new();
    for (name, chart) in [("loss.svg", loss), ("ap.svg", ap)] {
        let path = dir.join(name);
        chart.write(&path)?;
        written.push(path);
    }
    Ok(written)
}

//! [`PiecewiseLinear`]: time (or bytes) as a piecewise-linear function of size, with the
//! breakpoints found from the data.
//!
//! The fit is optimal segmented least squares: for every segment count `k` up to
//! [`FitOptions::max_segments`], a dynamic program over the sorted samples finds the split into
//! `k` runs of consecutive samples that minimizes the total squared error of one least-squares
//! line per run; the count is then chosen by the Bayesian information criterion
//! `n ln(SSE_k / n) + (3k - 1) ln n` (a slope, an intercept and a breakpoint per segment). Errors
//! are relative by default (weights `1 / y^2`), because profiled times span orders of magnitude.

use serde::{Deserialize, Serialize};

/// A function made of line segments over consecutive ranges of sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PiecewiseLinear {
    segments: Vec<LinearSegment>,
}

/// One segment: `y = intercept + slope * x`, fitted to the samples with `x` in
/// `[x_first, x_last]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearSegment {
    /// Smallest sample size of the segment.
    pub x_first: f64,
    /// Largest sample size of the segment.
    pub x_last: f64,
    /// Slope.
    pub slope: f64,
    /// Value at `x = 0`.
    pub intercept: f64,
}

/// Options of [`PiecewiseLinear::fit`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitOptions {
    /// Most segments considered. Default: 6.
    pub max_segments: usize,
    /// Fewest samples per segment (at least 2). Default: 2.
    pub min_points_per_segment: usize,
    /// Weigh squared errors by `1 / y^2` (relative errors) instead of 1. Default: true.
    pub relative: bool,
}

/// Why samples cannot be fitted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Fewer samples than one segment needs.
    #[error("{count} samples: at least {needed} are needed")]
    TooFewPoints {
        /// Samples given.
        count: usize,
        /// Samples needed.
        needed: usize,
    },
    /// A sample is NaN or infinite.
    #[error("sample {index} is not finite: ({x}, {y})")]
    NonFinite {
        /// Index of the sample as given.
        index: usize,
        /// Its size.
        x: f64,
        /// Its value.
        y: f64,
    },
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            max_segments: 6,
            min_points_per_segment: 2,
            relative: true,
        }
    }
}

impl LinearSegment {
    /// The segment's line at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

impl PiecewiseLinear {
    /// Fits `(x, y)` samples (any order; equal `x` allowed).
    pub fn fit(points: &[(f64, f64)], options: &FitOptions) -> Result<Self, FitError> {
        if let Some(index) = points
            .iter()
            .position(|(x, y)| !x.is_finite() || !y.is_finite())
        {
            let (x, y) = points[index];
            return Err(FitError::NonFinite { index, x, y });
        }
        let min_points = options.min_points_per_segment.max(2);
        if points.len() < min_points {
            return Err(FitError::TooFewPoints {
                count: points.len(),
                needed: min_points,
            });
        }
        let mut sorted = points.to_vec();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let scale = sorted
            .iter()
            .fold(0.0f64, |m, p| m.max(p.1.abs()))
            .max(f64::MIN_POSITIVE);
        let weights: Vec<f64> = sorted
            .iter()
            .map(|&(_, y)| {
                if options.relative {
                    1.0 / y.abs().max(1e-9 * scale).powi(2)
                } else {
                    1.0
                }
            })
            .collect();
        let sums = PrefixSums::new(&sorted, &weights);
        let n = sorted.len();
        let max_k = options.max_segments.max(1).min(n / min_points);

        // best[k][j]: least error of fitting samples 0..j with k segments; cut[k][j]: start of the
        // last segment in that fit.
        let mut best = vec![vec![f64::INFINITY; n + 1]; max_k + 1];
        let mut cut = vec![vec![0usize; n + 1]; max_k + 1];
        best[0][0] = 0.0;
        for k in 1..=max_k {
            for j in k * min_points..=n {
                for i in (k - 1) * min_points..=j - min_points {
                    if best[k - 1][i].is_finite() {
                        let error = best[k - 1][i] + sums.line(i, j).2;
                        if error < best[k][j] {
                            best[k][j] = error;
                            cut[k][j] = i;
                        }
                    }
                }
            }
        }
        // Model selection; the error floor (relative 1e-9) keeps exact fits comparable.
        let floor = if options.relative {
            1e-18
        } else {
            (1e-9 * scale).powi(2)
        };
        let score = |k: usize| {
            let nf = n as f64;
            nf * (best[k][n] / nf).max(floor).ln() + (3 * k - 1) as f64 * nf.ln()
        };
        let k = (1..=max_k)
            .filter(|&k| best[k][n].is_finite())
            .min_by(|&a, &b| score(a).total_cmp(&score(b)))
            .unwrap_or(1);

        let mut segments = Vec::with_capacity(k);
        let mut end = n;
        for level in (1..=k).rev() {
            let start = cut[level][end];
            let (slope, intercept, _) = sums.line(start, end);
            segments.push(LinearSegment {
                x_first: sorted[start].0,
                x_last: sorted[end - 1].0,
                slope,
                intercept,
            });
            end = start;
        }
        segments.reverse();
        Ok(Self { segments })
    }

    /// The fitted segments, by increasing size.
    pub fn segments(&self) -> &[LinearSegment] {
        &self.segments
    }

    /// Sizes where one segment hands over to the next (midway between the last sample of one
    /// segment and the first of the next).
    pub fn breakpoints(&self) -> Vec<f64> {
        self.segments
            .windows(2)
            .map(|w| 0.5 * (w[0].x_last + w[1].x_first))
            .collect()
    }

    /// The value at `x`: the segment covering `x`; between two segments, the straight line between
    /// their end values; beyond the samples, the first or last segment extended. Never negative.
    pub fn eval(&self, x: f64) -> f64 {
        let segments = &self.segments;
        let value = match segments.iter().position(|s| x <= s.x_last) {
            None => segments.last().map_or(0.0, |s| s.at(x)),
            Some(0) => segments[0].at(x),
            Some(i) => {
                let (previous, next) = (&segments[i - 1], &segments[i]);
                if x >= next.x_first {
                    next.at(x)
                } else {
                    let (x0, y0) = (previous.x_last, previous.at(previous.x_last));
                    let (x1, y1) = (next.x_first, next.at(next.x_first));
                    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
                }
            }
        };
        value.max(0.0)
    }
}

/// Weighted prefix sums for O(1) least-squares lines over any run of samples.
struct PrefixSums {
    w: Vec<f64>,
    wx: Vec<f64>,
    wy: Vec<f64>,
    wxx: Vec<f64>,
    wxy: Vec<f64>,
    wyy: Vec<f64>,
    /// Sizes are centred on their mean to keep the sums well conditioned.
    x_mean: f64,
}

impl PrefixSums {
    fn new(points: &[(f64, f64)], weights: &[f64]) -> Self {
        let x_mean = points.iter().map(|p| p.0).sum::<f64>() / points.len() as f64;
        let mut sums = Self {
            w: vec![0.0],
            wx: vec![0.0],
            wy: vec![0.0],
            wxx: vec![0.0],
            wxy: vec![0.0],
            wyy: vec![0.0],
            x_mean,
        };
        for (&(x, y), &w) in points.iter().zip(weights) {
            let x = x - x_mean;
            let push = |v: &mut Vec<f64>, add: f64| v.push(v[v.len() - 1] + add);
            push(&mut sums.w, w);
            push(&mut sums.wx, w * x);
            push(&mut sums.wy, w * y);
            push(&mut sums.wxx, w * x * x);
            push(&mut sums.wxy, w * x * y);
            push(&mut sums.wyy, w * y * y);
        }
        sums
    }

    /// Weighted least-squares line through samples `i..j`: `(slope, intercept, error)`, in the
    /// original (uncentred) sizes.
    fn line(&self, i: usize, j: usize) -> (f64, f64, f64) {
        let d = |v: &[f64]| v[j] - v[i];
        let (w, wx, wy, wxx, wxy, wyy) = (
            d(&self.w),
            d(&self.wx),
            d(&self.wy),
            d(&self.wxx),
            d(&self.wxy),
            d(&self.wyy),
        );
        let sxx = wxx - wx * wx / w;
        let sxy = wxy - wx * wy / w;
        let syy = wyy - wy * wy / w;
        let slope = if sxx > 1e-12 * wxx.abs().max(f64::MIN_POSITIVE) {
            sxy / sxx
        } else {
            0.0
        };
        let error = (syy - slope * sxy).max(0.0);
        let intercept_centred = (wy - slope * wx) / w;
        (slope, intercept_centred - slope * self.x_mean, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic noise in `[-amplitude, amplitude]`.
    fn noise(i: usize, amplitude: f64) -> f64 {
        let h = (i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17);
        amplitude * ((h % 2001) as f64 / 1000.0 - 1.0)
    }

    #[test]
    fn recovers_known_breakpoints() {
        // Flat (launch-bound) up to x = 100, then slope 0.01 up to 1000, then slope 0.05.
        let truth = |x: f64| {
            if x <= 100.0 {
                1.0
            } else if x <= 1000.0 {
                1.0 + 0.01 * (x - 100.0)
            } else {
                10.0 + 0.05 * (x - 1000.0)
            }
        };
        let points: Vec<(f64, f64)> = (1..=60)
            .map(|i| {
                let x = 2000.0 * (i as f64 / 60.0).powi(2) + 5.0;
                (x, truth(x) * (1.0 + noise(i, 0.005)))
            })
            .collect();
        let fit = PiecewiseLinear::fit(&points, &FitOptions::default()).unwrap();
        let breaks = fit.breakpoints();
        assert_eq!(breaks.len(), 2, "segments: {:?}", fit.segments());
        assert!((breaks[0] - 100.0).abs() < 30.0, "{breaks:?}");
        assert!((breaks[1] - 1000.0).abs() < 80.0, "{breaks:?}");
        for &(x, _) in &points {
            assert!((fit.eval(x) - truth(x)).abs() / truth(x) < 0.03, "x = {x}");
        }
        assert!((fit.segments()[2].slope - 0.05).abs() < 0.002);
    }

    #[test]
    fn a_line_stays_one_segment_and_extrapolates() {
        let points: Vec<(f64, f64)> = (0..20)
            .map(|i| (i as f64 * 10.0, 3.0 + 2.0 * i as f64 * 10.0))
            .collect();
        let fit = PiecewiseLinear::fit(&points, &FitOptions::default()).unwrap();
        assert_eq!(fit.segments().len(), 1);
        assert!((fit.eval(1000.0) - 2003.0).abs() < 1e-6);
        assert!((fit.eval(55.0) - 113.0).abs() < 1e-9);
    }

    #[test]
    fn exact_two_segment_data_with_a_geometric_ladder() {
        // y = max(5e-6, x * 1e-9): launch-bound until x = 5000.
        let points: Vec<(f64, f64)> = (6..=20)
            .map(|p| {
                let x = (1u64 << p) as f64;
                (x, (x * 1e-9).max(5e-6))
            })
            .collect();
        let fit = PiecewiseLinear::fit(&points, &FitOptions::default()).unwrap();
        assert_eq!(fit.segments().len(), 2, "{:?}", fit.segments());
        let b = fit.breakpoints()[0];
        assert!((4096.0..=8192.0).contains(&b), "{b}");
        // Between the two segments the fit interpolates.
        assert!((fit.eval(6000.0) - 6e-6).abs() / 6e-6 < 0.25);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            PiecewiseLinear::fit(&[(1.0, 1.0)], &FitOptions::default()),
            Err(FitError::TooFewPoints {
                count: 1,
                needed: 2
            })
        );
        assert!(matches!(
            PiecewiseLinear::fit(&[(1.0, 1.0), (2.0, f64::NAN)], &FitOptions::default()),
            Err(FitError::NonFinite { index: 1, .. })
        ));
    }

    #[test]
    fn never_negative() {
        let fit =
            PiecewiseLinear::fit(&[(10.0, 1.0), (20.0, 2.0)], &FitOptions::default()).unwrap();
        assert_eq!(fit.eval(0.0), 0.0);
        assert!((fit.eval(5.0) - 0.5).abs() < 1e-12);
    }
}

//! Small, dependency-free SVG charts: training curves (`megagraph train --plot`) and the
//! planner's predicted-versus-measured scatter (`megagraph plan --validate`).
//!
//! ```
//! use megagraph_train::plot::{Chart, Series, SeriesStyle};
//!
//! let svg = Chart::new("loss", "epoch", "loss")
//!     .with_series(Series::new("train", vec![(1.0, 2.0), (2.0, 1.5), (3.0, 1.2)], SeriesStyle::Line))
//!     .to_svg();
//! assert!(svg.starts_with("<svg"));
//! ```

use std::fmt::Write as _;
use std::path::Path;

use crate::error::Result;
use crate::files::write_atomically;

/// Width of a chart, in pixels.
const WIDTH: f64 = 640.0;
/// Height of a chart, in pixels.
const HEIGHT: f64 = 400.0;
/// Margins: left, right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (70.0, 150.0, 40.0, 50.0);
/// Series colours, used in turn.
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
/// Number of ticks per axis.
const TICKS: usize = 5;

/// How a [`Series`] is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesStyle {
    /// Points joined by a line, in x order as given.
    Line,
    /// Separate markers.
    Points,
}

/// One named set of `(x, y)` points of a [`Chart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// The points; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
    /// Line or markers.
    pub style: SeriesStyle,
}

impl Series {
    /// A series named `name`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, style: SeriesStyle) -> Self {
        Self {
            name: name.into(),
            points,
            style,
        }
    }
}

/// A 2-D chart with linear axes, rendered as a standalone SVG document.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Label of the horizontal axis.
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// The data.
    pub series: Vec<Series>,
    /// Draw the line `y = x` (for predicted-versus-measured plots); both axes then share one
    /// range.
    pub diagonal: bool,
}

impl Chart {
    /// An empty chart.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            diagonal: false,
        }
    }

    /// Adds a series.
    pub fn with_series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Draws `y = x` and gives both axes the same range.
    pub fn with_diagonal(mut self) -> Self {
        self.diagonal = true;
        self
    }

    /// The data range `(x_min, x_max, y_min, y_max)`, widened so that it is never empty.
    fn ranges(&self) -> (f64, f64, f64, f64) {
        let finite = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
        for &(x, y) in finite {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if self.diagonal {
            let (lo, hi) = (x0.min(y0).min(0.0), x1.max(y1));
            (x0, x1, y0, y1) = (lo, hi, lo, hi);
        }
        let widen = |lo: f64, hi: f64| {
            if hi - lo > f64::EPSILON * hi.abs().max(1.0) {
                let pad = (hi - lo) * 0.05;
                (lo - pad, hi + pad)
            } else {
                (lo - 0.5, hi + 0.5)
            }
        };
        let (x0, x1) = widen(x0, x1);
        let (y0, y1) = widen(y0, y1);
        (x0, x1, y0, y1)
    }

    /// The chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let (left, right, top, bottom) = MARGIN;
        let (plot_w, plot_h) = (WIDTH - left - right, HEIGHT - top - bottom);
        let (x0, x1, y0, y1) = self.ranges();
        let px = |x: f64| left + (x - x0) / (x1 - x0) * plot_w;
        let py = |y: f64| top + plot_h - (y - y0) / (y1 - y0) * plot_h;

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            left + plot_w / 2.0,
            escape(&self.title)
        );
        // axes, grid and ticks
        let _ = writeln!(
            svg,
            r#"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
        );
        for i in 0..=TICKS {
            let t = i as f64 / TICKS as f64;
            let (x, y) = (x0 + t * (x1 - x0), y0 + t * (y1 - y0));
            let _ = writeln!(
                svg,
                "<line x1=\"{0:.1}\" y1=\"{top}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{3}</text>",
                px(x),
                top + plot_h,
                top + plot_h + 16.0,
                tick_label(x, x1 - x0)
            );
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
                py(y),
                left + plot_w,
                left - 6.0,
                py(y) + 4.0,
                tick_label(y, y1 - y0)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            left + plot_w / 2.0,
            HEIGHT - 12.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="16" y="{0:.1}" text-anchor="middle" transform="rotate(-90 16 {0:.1})">{1}</text>"#,
            top + plot_h / 2.0,
            escape(&self.y_label)
        );
        if self.diagonal {
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="4 4"/>"##,
                px(x0),
                py(x0),
                px(x1),
                py(x1)
            );
        }
        // data and legend
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points: Vec<(f64, f64)> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| (px(x), py(y)))
                .collect();
            match series.style {
                SeriesStyle::Line => {
                    let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                    let _ = writeln!(
                        svg,
                        r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                        path.join(" ")
                    );
                }
                SeriesStyle::Points => {
                    for (x, y) in &points {
                        let _ = writeln!(svg, r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{colour}"/>"#);
                    }
                }
            }
            let ly = top + 10.0 + 18.0 * i as f64;
            let lx = left + plot_w + 12.0;
            let _ = writeln!(
                svg,
                r#"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{colour}"/><text x="{}" y="{:.1}">{}</text>"#,
                ly - 10.0,
                lx + 18.0,
                ly,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Writes the SVG document to `path` atomically (a temporary file, then a rename).
    ///
    /// # Errors
    ///
    /// [`TrainError::Output`](crate::TrainError::Output) naming the path.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.to_svg().as_bytes())
    }
}

/// A tick label with as many decimals as the axis span needs.
fn tick_label(value: f64, span: f64) -> String {
    let magnitude = value.abs().max(span.abs());
    if magnitude != 0.0 && !(1e-3..1e6).contains(&magnitude) {
        return format!("{value:.2e}");
    }
    let decimals = if span >= 10.0 {
        0
    } else {
        (2.0 - span.log10().floor()).clamp(0.0, 6.0) as usize
    };
    format!("{value:.decimals$}")
}

/// `text` with the XML special characters escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_point_and_legend_entry() {
        let chart = Chart::new("acc <train>", "epoch", "accuracy")
            .with_series(Series::new("train", vec![(1.0, 0.5), (2.0, 0.7), (3.0, f64::NAN)], SeriesStyle::Line))
            .with_series(Series::new("valid", vec![(1.0, 0.4), (2.0, 0.6)], SeriesStyle::Points));
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("acc &lt;train&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 2);
        // the NaN point is skipped: two coordinate pairs in the line
        let line = svg.lines().find(|l| l.starts_with("<polyline")).unwrap_or_default();
        assert_eq!(line.matches(',').count(), 2);
        assert!(svg.contains(">valid</text>"));
    }

    #[test]
    fn points_land_inside_the_plot_area() {
        let chart = Chart::new("t", "x", "y")
            .with_series(Series::new("s", vec![(0.0, 0.0), (10.0, 5.0)], SeriesStyle::Points));
        let svg = chart.to_svg();
        for line in svg.lines().filter(|l| l.starts_with("<circle")) {
            let attr = |name: &str| -> f64 {
                let start = line.find(&format!("{name}=\"")).map_or(0, |i| i + name.len() + 2);
                let end = line[start..].find('"').map_or(start, |i| start + i);
                line[start..end].parse().unwrap_or(f64::NAN)
            };
            let (cx, cy) = (attr("cx"), attr("cy"));
            assert!((MARGIN.0..=WIDTH - MARGIN.1).contains(&cx), "{line}");
            assert!((MARGIN.2..=HEIGHT - MARGIN.3).contains(&cy), "{line}");
        }
    }

    #[test]
    fn diagonal_shares_the_axis_range() {
        let chart = Chart::new("t", "predicted", "measured")
            .with_series(Series::new("plans", vec![(1.0, 2.0), (3.0, 2.5)], SeriesStyle::Points))
            .with_diagonal();
        let (x0, x1, y0, y1) = chart.ranges();
        assert_eq!((x0, x1), (y0, y1));
        assert!(x0 <= 0.0 && x1 >= 3.0);
        assert!(chart.to_svg().contains("stroke-dasharray"));
    }

    #[test]
    fn empty_and_flat_charts_render() {
        assert!(Chart::new("e", "x", "y").to_svg().contains("</svg>"));
        let flat = Chart::new("f", "x", "y")
            .with_series(Series::new("c", vec![(1.0, 3.0), (2.0, 3.0)], SeriesStyle::Line));
        let (_, _, y0, y1) = flat.ranges();
        assert!(y0 < 3.0 && y1 > 3.0);
    }

    #[test]
    fn ticks_have_sensible_precision() {
        assert_eq!(tick_label(150.0, 200.0), "150");
        assert_eq!(tick_label(0.25, 1.0), "0.25");
        assert_eq!(tick_label(2.0e-5, 1.0e-5), "2.00e-5");
    }
}

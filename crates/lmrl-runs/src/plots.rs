//! PNG and SVG plots of a run's metrics, and the reward–KL frontier of a sweep.
use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError};
use crate::metrics::MetricRow;

const SIZE: (u32, u32) = (900, 560);
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A named series of (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// A horizontal reference line on a run's task-reward plot, e.g. the base model's held-out
/// task reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub label: String,
    pub value: f64,
}

/// The run directory's reference levels ([`write_levels`]), drawn by [`draw_run`].
pub const LEVELS_FILE: &str = "levels.json";

/// Iterations averaged by the bold curves of a run's plots: a centred moving average, shorter
/// at the ends. One batch of 16 has a reward standard error of ≈ 0.2, as large as what a
/// run of 15 iterations moves, so the raw per-iteration line alone reads as noise.
pub const SMOOTHING: usize = 5;

/// Writes the reference levels of run directory `out`, replacing any earlier ones.
pub fn write_levels(out: &Path, levels: &[Level]) -> Result<()> {
    let text = serde_json::to_string_pretty(levels).expect("levels serialise");
    crate::atomic_write(&out.join(LEVELS_FILE), text.as_bytes())
}

/// The reference levels of run directory `out` (none when it has no [`LEVELS_FILE`]).
pub fn read_levels(out: &Path) -> Result<Vec<Level>> {
    let path = out.join(LEVELS_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&path).map_err(crate::error::io("read", &path))?;
    serde_json::from_str(&text).map_err(|e| RunError::Format {
        path: path.clone(),
        reason: format!("expected a list of {{\"label\", \"value\"}}: {e}"),
    })
}

/// Draws `task_reward`, `kl` and `combined_reward` against iteration — per agent the raw
/// values as a faint line and their [`SMOOTHING`]-iteration moving average in bold, role
/// exchanges (an agent's role differs from its previous row's) as dashed verticals, `levels`
/// as dashed horizontals on the task reward — and task reward against KL, each as
/// `<name>.png` and `<name>.svg` in `dir`.
pub fn plot_run(rows: &[MetricRow], levels: &[Level], dir: &Path) -> Result<()> {
    type Pick = fn(&MetricRow) -> f64;
    let panels: [(&str, &str, Pick, bool); 3] = [
        ("task_reward", "task reward", |r| r.task_reward, true),
        ("kl", "KL (nats)", |r| r.kl, false),
        (
            "combined_reward",
            "task reward − β·KL",
            |r| r.combined_reward,
            false,
        ),
    ];
    let exchanges = role_exchanges(rows);
    for (name, label, pick, with_levels) in panels {
        let series = by_agent(rows, |r| (r.iteration as f64, pick(r)));
        let spec = LineSpec {
            title: name,
            xlabel: "iteration",
            ylabel: label,
            series: &series,
            style: LineStyle::Smoothed {
                exchanges: &exchanges,
                levels: if with_levels { levels } else { &[] },
            },
        };
        draw_spec(dir, name, &spec)?;
    }
    let series = by_agent(rows, |r| (r.kl, r.task_reward));
    let spec = LineSpec {
        title: "reward_vs_kl",
        xlabel: "KL (nats)",
        ylabel: "task reward",
        series: &series,
        style: LineStyle::Points,
    };
    draw_spec(dir, "reward_vs_kl", &spec)
}

/// Redraws the plots of run directory `out` from its `metrics.csv` and [`LEVELS_FILE`]
/// ([`plot_run`]); nothing when it has no rows yet.
pub fn draw_run(out: &Path) -> Result<()> {
    let rows = crate::metrics::read_rows(&out.join("metrics.csv"))?;
    if !rows.is_empty() {
        plot_run(&rows, &read_levels(out)?, out)?;
    }
    Ok(())
}

/// The x positions (half-way between iterations) where some agent's role changes.
fn role_exchanges(rows: &[MetricRow]) -> Vec<f64> {
    let mut last: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    let mut at = std::collections::BTreeSet::new();
    for r in rows {
        if let Some((it, role)) = last.insert(&r.agent, (r.iteration, &r.role))
            && role != r.role
            && it < r.iteration
        {
            at.insert(r.iteration);
        }
    }
    at.into_iter().map(|it| it as f64 - 0.5).collect()
}

/// The centred moving average of `pts` (sorted by x) over `window` points, shorter at the ends.
fn moving_average(pts: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let half = window / 2;
    (0..pts.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + half + 1).min(pts.len());
            let ys: Vec<f64> = pts[lo..hi]
                .iter()
                .map(|p| p.1)
                .filter(|y| y.is_finite())
                .collect();
            let y = if ys.is_empty() {
                f64::NAN
            } else {
                ys.iter().sum::<f64>() / ys.len() as f64
            };
            (pts[i].0, y)
        })
        .collect()
}

fn by_agent(rows: &[MetricRow], xy: impl Fn(&MetricRow) -> (f64, f64)) -> Vec<Series> {
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        m.entry(r.agent.clone()).or_default().push(xy(r));
    }
    m.into_iter().collect()
}

/// One point of a reward–KL frontier: mean ± std over seeds of one setting.
#[derive(Debug, Clone)]
pub struct FrontierPoint {
    pub label: String,
    pub kl_mean: f64,
    pub kl_std: f64,
    pub reward_mean: f64,
    pub reward_std: f64,
}

/// Draws frontier points (grouped by `label`, e.g. the algorithm) with error bars.
pub fn plot_frontier(points: &[FrontierPoint], dir: &Path, name: &str) -> Result<()> {
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    write_png(&png, |area| draw_frontier(area, points))?;
    draw_frontier(SVGBackend::new(&svg, SIZE).into_drawing_area(), points)
        .map_err(|e| plot_err(&svg, e))
}

/// Draws on an RGB canvas of [`SIZE`] and writes it to `path` as an 8-bit RGB PNG. The PNG is
/// encoded here rather than by plotters, whose encoder brings a whole image library (JPEG,
/// BMP) into the build for this one format.
fn write_png(
    path: &Path,
    draw: impl FnOnce(DrawingArea<BitMapBackend, Shift>) -> PlotResult<()>,
) -> Result<()> {
    let (w, h) = SIZE;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    draw(BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area())
        .map_err(|e| plot_err(path, e))?;
    encode_png(path, &rgb).map_err(|e| plot_err(path, e))
}

fn encode_png(path: &Path, rgb: &[u8]) -> PlotResult<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, SIZE.0, SIZE.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // A filter chosen per row, as plotters' encoder did: a fixed one made these plots ~4× larger.
    encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(())
}

fn draw_spec(dir: &Path, name: &str, spec: &LineSpec<'_>) -> Result<()> {
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    write_png(&png, |area| spec.draw(area))?;
    spec.draw(SVGBackend::new(&svg, SIZE).into_drawing_area())
        .map_err(|e| plot_err(&svg, e))
}

/// The same quantity from several runs of one setting (one run per seed), to be drawn as the
/// mean over runs with a ± one standard deviation band, as the paper's figures are.
#[derive(Debug, Clone)]
pub struct CurveGroup {
    pub label: String,
    /// One `(iteration, value)` series per run.
    pub runs: Vec<Vec<(f64, f64)>>,
}

/// Mean and sample standard deviation (n − 1; 0 for a single value), as the seed spreads of
/// the sweep's frontier and curves are reported.
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// Two-sided 97.5% quantile of Student's t with `df` degrees of freedom (tabulated; ≥ 30 uses the
/// normal quantile's correction `1.96 + 2.4/df`, exact to 3 decimals at df = 30).
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// Mean and sample standard deviation over runs at every x that at least one run has.
pub fn mean_std_by_x(runs: &[Vec<(f64, f64)>]) -> Vec<(f64, f64, f64)> {
    let mut at: BTreeMap<i64, (f64, Vec<f64>)> = BTreeMap::new();
    for &(x, y) in runs.iter().flatten().filter(|(_, y)| y.is_finite()) {
        // Iterations are integers; keying by the rounded millis keeps f64 x usable as a key.
        at.entry((x * 1000.0).round() as i64)
            .or_insert((x, Vec::new()))
            .1
            .push(y);
    }
    at.into_values()
        .map(|(x, ys)| {
            let (m, sd) = mean_std(&ys);
            (x, m, sd)
        })
        .collect()
}

/// Draws each group's mean against iteration with a ± std band, as `<name>.png` and `.svg`.
pub fn plot_curves(groups: &[CurveGroup], dir: &Path, name: &str, ylabel: &str) -> Result<()> {
    let stats: Vec<Band> = groups
        .iter()
        .map(|g| (g.label.clone(), mean_std_by_x(&g.runs)))
        .collect();
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    let title = format!("{ylabel} (mean ± std over seeds)");
    write_png(&png, |area| draw_bands(area, &title, ylabel, &stats))?;
    draw_bands(
        SVGBackend::new(&svg, SIZE).into_drawing_area(),
        &title,
        ylabel,
        &stats,
    )
    .map_err(|e| plot_err(&svg, e))
}

type Band = (String, Vec<(f64, f64, f64)>);
type PlotResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The common frame of every plot: title, labelled axes over the given ranges, a mesh.
fn axes<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    (xlabel, xr): (&str, std::ops::Range<f64>),
    (ylabel, yr): (&str, std::ops::Range<f64>),
) -> PlotResult<Chart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    let mut chart = chart_on(area, title, xr, yr)?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc(ylabel)
        .draw()?;
    Ok(chart)
}

fn chart_on<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    xr: std::ops::Range<f64>,
    yr: std::ops::Range<f64>,
) -> PlotResult<Chart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    Ok(ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xr, yr)?)
}

fn legend_and_present<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    area: &DrawingArea<DB, Shift>,
) -> PlotResult<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    area.present()?;
    Ok(())
}

fn draw_bands<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    title: &str,
    ylabel: &str,
    stats: &[Band],
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let corners = stats
        .iter()
        .flat_map(|(_, v)| v.iter().flat_map(|&(x, m, s)| [(x, m - s), (x, m + s)]));
    let (xr, yr) = ranges(corners);
    let mut chart = axes(&area, title, ("iteration", xr), (ylabel, yr))?;
    for (i, (label, v)) in stats.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let band: Vec<(f64, f64)> = v
            .iter()
            .map(|&(x, m, s)| (x, m + s))
            .chain(v.iter().rev().map(|&(x, m, s)| (x, m - s)))
            .collect();
        chart.draw_series(std::iter::once(Polygon::new(band, color.mix(0.2).filled())))?;
        let style = ShapeStyle::from(&color).filled();
        chart
            .draw_series(LineSeries::new(
                v.iter().map(|&(x, m, _)| (x, m)),
                color.stroke_width(2),
            ))?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], style));
    }
    legend_and_present(&mut chart, &area)
}

fn plot_err(path: &Path, e: Box<dyn std::error::Error>) -> RunError {
    RunError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

struct LineSpec<'a> {
    title: &'a str,
    xlabel: &'a str,
    ylabel: &'a str,
    series: &'a [Series],
    style: LineStyle<'a>,
}

enum LineStyle<'a> {
    /// One marker per point (task reward against KL).
    Points,
    /// Against iteration: raw and smoothed lines, role exchanges, reference levels.
    Smoothed {
        exchanges: &'a [f64],
        levels: &'a [Level],
    },
}

impl LineSpec<'_> {
    fn draw<DB: DrawingBackend>(
        &self,
        area: DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), Box<dyn std::error::Error>>
    where
        DB::ErrorType: 'static,
    {
        area.fill(&WHITE)?;
        let levels: &[Level] = match self.style {
            LineStyle::Smoothed { levels, .. } => levels,
            LineStyle::Points => &[],
        };
        let all = self.series.iter().flat_map(|(_, p)| p.iter().copied());
        let (xr, yr) = ranges(all.chain(levels.iter().filter_map(|l| {
            let x = self.series.first()?.1.first()?.0;
            Some((x, l.value))
        })));
        let mut chart = match self.style {
            LineStyle::Points => axes(&area, self.title, (self.xlabel, xr), (self.ylabel, yr))?,
            LineStyle::Smoothed { .. } => iteration_axes(&area, self.title, xr, (self.ylabel, yr))?,
        };
        let (x0, x1) = (chart.x_range().start, chart.x_range().end);
        let (y0, y1) = (chart.y_range().start, chart.y_range().end);
        if let LineStyle::Smoothed { exchanges, levels } = self.style {
            let grey = RGBColor(120, 120, 120);
            for (i, &x) in exchanges.iter().enumerate() {
                let line = DashedLineSeries::new([(x, y0), (x, y1)], 6, 4, grey.stroke_width(1));
                let anno = chart.draw_series(line)?;
                if i == 0 {
                    anno.label("role exchange")
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], grey));
                }
            }
            for l in levels {
                let line = DashedLineSeries::new(
                    [(x0, l.value), (x1, l.value)],
                    8,
                    4,
                    BLACK.stroke_width(2),
                );
                chart
                    .draw_series(line)?
                    .label(l.label.as_str())
                    .legend(|(x, y)| {
                        PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2))
                    });
            }
        }
        for (i, (label, pts)) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = ShapeStyle::from(&color).filled();
            let anno = match self.style {
                LineStyle::Points => {
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))?
                }
                LineStyle::Smoothed { .. } => {
                    chart.draw_series(LineSeries::new(
                        pts.iter().copied(),
                        color.mix(0.3).stroke_width(1),
                    ))?;
                    let smooth = moving_average(pts, SMOOTHING);
                    chart.draw_series(LineSeries::new(smooth, color.stroke_width(3)))?
                }
            };
            let name = match self.style {
                LineStyle::Points => label.clone(),
                LineStyle::Smoothed { .. } => {
                    format!("{label} ({SMOOTHING}-iteration mean; faint: raw)")
                }
            };
            anno.label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], style));
        }
        legend_and_present(&mut chart, &area)
    }
}

/// Axes whose x is the iteration: integer tick labels only.
fn iteration_axes<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    xr: std::ops::Range<f64>,
    (ylabel, yr): (&str, std::ops::Range<f64>),
) -> PlotResult<Chart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    let mut chart = chart_on(area, title, xr.clone(), yr)?;
    // One label per iteration up to 20 of them, else about 10 whole-number ones; a label is
    // drawn only where it falls on a whole iteration.
    let span = (xr.end - xr.start).max(1.0);
    let labels = if span <= 21.0 {
        span.ceil() as usize + 1
    } else {
        11
    };
    chart
        .configure_mesh()
        .x_desc("iteration")
        .y_desc(ylabel)
        .x_labels(labels)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                format!("{}", x.round() as i64)
            } else {
                String::new()
            }
        })
        .draw()?;
    Ok(chart)
}

fn draw_frontier<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    points: &[FrontierPoint],
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let corners = points.iter().flat_map(|p| {
        [
            (p.kl_mean - p.kl_std, p.reward_mean - p.reward_std),
            (p.kl_mean + p.kl_std, p.reward_mean + p.reward_std),
        ]
    });
    let (xr, yr) = ranges(corners);
    let title = "task reward vs KL (mean ± std over seeds)";
    let mut chart = axes(&area, title, ("KL (nats)", xr), ("task reward", yr))?;
    let mut labels: Vec<&str> = points.iter().map(|p| p.label.as_str()).collect();
    labels.dedup();
    labels.sort();
    labels.dedup();
    for (i, label) in labels.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mine: Vec<&FrontierPoint> = points.iter().filter(|p| p.label == *label).collect();
        chart.draw_series(mine.iter().map(|p| {
            ErrorBar::new_vertical(
                p.kl_mean,
                p.reward_mean - p.reward_std,
                p.reward_mean,
                p.reward_mean + p.reward_std,
                color.filled(),
                6,
            )
        }))?;
        chart.draw_series(mine.iter().map(|p| {
            ErrorBar::new_horizontal(
                p.reward_mean,
                p.kl_mean - p.kl_std,
                p.kl_mean,
                p.kl_mean + p.kl_std,
                color.filled(),
                6,
            )
        }))?;
        let style = ShapeStyle::from(&color).filled();
        chart
            .draw_series(
                mine.iter()
                    .map(|p| Circle::new((p.kl_mean, p.reward_mean), 5, style)),
            )?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], style));
    }
    legend_and_present(&mut chart, &area)
}

/// Axis ranges covering every finite point, padded by 5% (and never empty).
fn ranges(
    points: impl Iterator<Item = (f64, f64)>,
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    (pad(x0, x1), pad(y0, y1))
}

fn pad(lo: f64, hi: f64) -> std::ops::Range<f64> {
    if lo > hi {
        return 0.0..1.0;
    }
    let m = ((hi - lo) * 0.05).max(1e-3);
    (lo - m)..(hi + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published values of Student's t (two-sided 95 %): df 4 → 2.776, df 30 → 2.042, df 60 →
    /// 2.000, df 120 → 1.980, the normal's 1.960 in the limit.
    #[test]
    fn t975_matches_the_tables() {
        assert_eq!(t975(4), 2.776);
        assert_eq!(t975(30), 2.042);
        assert!((t975(60) - 2.000).abs() < 1e-3);
        assert!((t975(120) - 1.980).abs() < 1e-3);
        assert!((t975(100_000) - 1.960).abs() < 1e-3);
        assert!(t975(0).is_nan());
    }

    #[test]
    fn mean_and_std_over_runs_per_iteration() {
        let runs = vec![
            vec![(0.0, 1.0), (1.0, 2.0)],
            vec![(0.0, 3.0), (1.0, 2.0), (2.0, 5.0)],
        ];
        let s = mean_std_by_x(&runs);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], (0.0, 2.0, 2f64.sqrt()), "mean 2, sample std √2");
        assert_eq!(s[1], (1.0, 2.0, 0.0));
        assert_eq!(s[2], (2.0, 5.0, 0.0), "a single run has no spread");
    }

    #[test]
    fn the_moving_average_is_centred_and_shorter_at_the_ends() {
        let pts: Vec<(f64, f64)> = [1.0, 2.0, 6.0, 3.0, 8.0]
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64, y))
            .collect();
        let m = moving_average(&pts, 3);
        let ys: Vec<f64> = m.iter().map(|p| p.1).collect();
        assert_eq!(ys, [1.5, 3.0, 11.0 / 3.0, 17.0 / 3.0, 5.5]);
        assert_eq!(m[4].0, 4.0);
        assert_eq!(moving_average(&pts, 1), pts);
    }

    #[test]
    fn role_exchanges_fall_between_the_iterations_where_a_role_changes() {
        use crate::metrics::MetricRow;
        let rows: Vec<MetricRow> = (0..12)
            .flat_map(|it| {
                let first = (it / 5) % 2 == 0;
                [("llm1", first), ("llm2", !first)].map(|(agent, pioneer)| {
                    let mut r = draw_tests::row(it, agent, 0.0);
                    r.role = if pioneer { "pioneer" } else { "observer" }.into();
                    r
                })
            })
            .collect();
        assert_eq!(role_exchanges(&rows), [4.5, 9.5]);
        let ppo: Vec<MetricRow> = (0..6)
            .map(|it| draw_tests::row(it, "policy", 0.0))
            .collect();
        assert!(role_exchanges(&ppo).is_empty());
    }

    #[test]
    fn levels_round_trip_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_levels(dir.path()).unwrap().is_empty());
        let levels = vec![Level {
            label: "base model".into(),
            value: -0.25,
        }];
        write_levels(dir.path(), &levels).unwrap();
        assert_eq!(read_levels(dir.path()).unwrap(), levels);
        std::fs::write(dir.path().join(LEVELS_FILE), "{\"value\": 1}").unwrap();
        let e = read_levels(dir.path()).unwrap_err().to_string();
        assert!(e.contains(LEVELS_FILE) && e.contains("label"), "{e}");
    }

    #[test]
    fn ranges_ignore_non_finite_and_are_never_empty() {
        let (x, y) = ranges([(1.0, 2.0), (f64::NAN, 5.0), (1.0, 2.0)].into_iter());
        assert!(x.start < 1.0 && x.end > 1.0);
        assert!(y.start < 2.0 && y.end > 2.0);
        let (x, _) = ranges(std::iter::empty());
        assert_eq!(x, 0.0..1.0);
    }
}

#[cfg(test)]
mod draw_tests {
    use super::*;
    use crate::metrics::MetricRow;

    pub(super) fn row(it: usize, agent: &str, r: f64) -> MetricRow {
        MetricRow {
            iteration: it,
            agent: agent.into(),
            role: "pioneer".into(),
            task_reward: r,
            kl: it as f64 * 0.2,
            beta: 0.3,
            combined_reward: r - 0.06 * it as f64,
            policy_loss: 0.0,
            value_loss: 0.0,
            entropy: 0.0,
            approxkl: 0.0,
            clipfrac: 0.0,
            response_len: 0.0,
            pioneer_task_reward: r,
            repetition: 0.0,
            pioneer_kl: 0.0,
            reward_std: None,
            frac_reward_zero_std: None,
            seconds: 0.0,
        }
    }

    /// Decodes `path` and checks it is an RGB image of [`SIZE`] with dark pixels in the band
    /// above the chart where only the caption's glyphs are drawn: a font backend that
    /// rasterised no text would leave that band white.
    fn assert_png_has_a_caption(path: &Path) {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0u8; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), SIZE);
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let stride = SIZE.0 as usize * 3;
        let dark = (12..40)
            .flat_map(|y| (300..600).map(move |x| y * stride + x * 3))
            .filter(|&i| buf[i..i + 3].iter().all(|&c| c < 128))
            .count();
        assert!(dark > 50, "{}: {dark} dark caption pixels", path.display());
    }

    #[test]
    fn plot_run_writes_png_and_svg_files() {
        let dir = std::env::temp_dir().join(format!("lmrl-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rows: Vec<_> = (0..10)
            .flat_map(|i| {
                [
                    row(i, "llm1", i as f64 * 0.1),
                    row(i, "llm2", i as f64 * 0.12),
                ]
            })
            .collect();
        let levels = [Level {
            label: "base model, held-out".into(),
            value: 0.3,
        }];
        plot_run(&rows, &levels, &dir).unwrap();
        for name in ["task_reward", "kl", "combined_reward", "reward_vs_kl"] {
            for ext in ["png", "svg"] {
                let p = dir.join(format!("{name}.{ext}"));
                let len = std::fs::metadata(&p).unwrap().len();
                assert!(len > 1000, "{} is only {len} bytes", p.display());
            }
        }
        assert_png_has_a_caption(&dir.join("task_reward.png"));
        let pts = vec![FrontierPoint {
            label: "ppo".into(),
            kl_mean: 1.0,
            kl_std: 0.2,
            reward_mean: 0.5,
            reward_std: 0.1,
        }];
        plot_frontier(&pts, &dir, "frontier").unwrap();
        assert!(dir.join("frontier.png").exists());
        let groups = vec![CurveGroup {
            label: "cory llm1".into(),
            runs: vec![vec![(0.0, 1.0), (1.0, 2.0)], vec![(0.0, 3.0), (1.0, 2.0)]],
        }];
        plot_curves(&groups, &dir, "curves", "task reward").unwrap();
        assert!(std::fs::metadata(dir.join("curves.png")).unwrap().len() > 1000);
        if std::env::var_os("LMRL_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

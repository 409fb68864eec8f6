//! PNG and SVG plots of a run's metrics, and the reward–KL frontier of a sweep.
use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

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

/// Draws `task_reward`, `kl` and `combined_reward` against iteration (one line per agent) and
/// task reward against KL, each as `<name>.png` and `<name>.svg` in `dir`.
pub fn plot_run(rows: &[MetricRow], dir: &Path) -> Result<()> {
    type Pick = fn(&MetricRow) -> f64;
    let panels: [(&str, &str, Pick); 3] = [
        ("task_reward", "task reward", |r| r.task_reward),
        ("kl", "KL (nats)", |r| r.kl),
        ("combined_reward", "task reward − β·KL", |r| {
            r.combined_reward
        }),
    ];
    for (name, label, pick) in panels {
        let series = by_agent(rows, |r| (r.iteration as f64, pick(r)));
        draw_lines(dir, name, "iteration", label, &series, false)?;
    }
    let series = by_agent(rows, |r| (r.kl, r.task_reward));
    draw_lines(
        dir,
        "reward_vs_kl",
        "KL (nats)",
        "task reward",
        &series,
        true,
    )
}

/// Redraws the plots of run directory `out` from its `metrics.csv` ([`plot_run`]); nothing
/// when it has no rows yet.
pub fn draw_run(out: &Path) -> Result<()> {
    let rows = crate::metrics::read_rows(&out.join("metrics.csv"))?;
    if !rows.is_empty() {
        plot_run(&rows, out)?;
    }
    Ok(())
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

fn draw_lines(
    dir: &Path,
    name: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    points_only: bool,
) -> Result<()> {
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    let spec = LineSpec {
        title: name,
        xlabel,
        ylabel,
        series,
        points_only,
    };
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
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xr, yr)?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc(ylabel)
        .draw()?;
    Ok(chart)
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
    points_only: bool,
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
        let all = self.series.iter().flat_map(|(_, p)| p.iter().copied());
        let (xr, yr) = ranges(all);
        let mut chart = axes(&area, self.title, (self.xlabel, xr), (self.ylabel, yr))?;
        for (i, (label, pts)) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = ShapeStyle::from(&color).filled();
            let anno = if self.points_only {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))?
            } else {
                chart.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            };
            anno.label(label.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], style));
        }
        legend_and_present(&mut chart, &area)
    }
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

    fn row(it: usize, agent: &str, r: f64) -> MetricRow {
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
        plot_run(&rows, &dir).unwrap();
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

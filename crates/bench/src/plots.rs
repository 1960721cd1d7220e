//! The plots of `flowshift compare`, each written as PNG and SVG: per-core load
//! over time (a heatmap per run), latency CDF per balancer and class, imbalance
//! over time, migrations per balancer. Drawn with `plotters`; text is rendered
//! with the system's DejaVu Sans (`scripts/deps.sh` installs `fonts-dejavu-core`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use plotters::coord::Shift;
use plotters::prelude::*;
use runtime::RunReport;

/// One run of a comparison: its label and report.
pub struct Labeled<'a> {
    pub label: String,
    pub report: &'a RunReport,
}

const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/local/share/fonts/DejaVuSans.ttf",
];

fn fonts() -> anyhow::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONT_PATHS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                format!(
                    "plots need a font: none of {} exists (install fonts-dejavu-core, e.g. with scripts/deps.sh)",
                    FONT_PATHS.join(", ")
                )
            })?;
        // registered once for the whole process
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "DejaVuSans.ttf is not a valid font".to_string())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

type Res<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A drawing that works on any backend (a closure cannot be generic).
trait Draw {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res<DB>;
}

fn write(dir: &Path, name: &str, size: (u32, u32), d: &impl Draw) -> anyhow::Result<Vec<PathBuf>> {
    struct F<'d, D>(&'d D);
    impl<D: Draw> F<'_, D> {
        fn png(&self, r: &DrawingArea<BitMapBackend<'_>, Shift>) -> Res<BitMapBackend<'_>> {
            self.0.draw(r)
        }
        fn svg(&self, r: &DrawingArea<SVGBackend<'_>, Shift>) -> Res<SVGBackend<'_>> {
            self.0.draw(r)
        }
    }
    let f = F(d);
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        f.png(&root)
            .map_err(|e| anyhow!("{}: {e}", png.display()))?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", png.display()))?;
    }
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        f.svg(&root)
            .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
        root.present()
            .map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    Ok(vec![png, svg])
}

struct Heatmap<'a>(&'a Labeled<'a>);

impl Draw for Heatmap<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res<DB> {
        let r = self.0.report;
        let l = &r.load_over_time;
        let cores = l.first().map_or(1, |s| s.load.len()).max(1);
        let t_end = l.last().map_or(1.0, |s| s.t_ns as f64 / 1e6).max(1e-3);
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "per-core load over time — {} (white 0 % → red 100 %)",
                    self.0.label
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0f64..t_end, 0f64..cores as f64)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("time (ms)")
            .y_desc("core (row k starts at k)")
            .y_labels(cores + 1)
            .y_label_formatter(&|y| {
                if y.fract() == 0.0 && *y < cores as f64 {
                    format!("{}", *y as i64)
                } else {
                    String::new()
                }
            })
            .draw()?;
        let mut prev = 0.0;
        let mut cells = Vec::new();
        for s in l {
            let t = s.t_ns as f64 / 1e6;
            for (c, v) in s.load.iter().enumerate() {
                let v = v.clamp(0.0, 1.0);
                let shade = (255.0 * (1.0 - v)) as u8;
                cells.push(Rectangle::new(
                    [(prev, c as f64), (t, c as f64 + 1.0)],
                    RGBColor(255, shade, shade / 2 + 64).filled(),
                ));
            }
            prev = t;
        }
        chart.draw_series(cells)?;
        Ok(())
    }
}

struct Cdf<'a>(&'a [Labeled<'a>]);

impl Draw for Cdf<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res<DB> {
        let (mut lo, mut hi) = (f64::MAX, 1.0f64);
        for r in self.0 {
            for pts in r.report.latency_cdf.values() {
                for (v, _) in pts {
                    let us = *v as f64 / 1e3;
                    lo = lo.min(us);
                    hi = hi.max(us);
                }
            }
        }
        let lo = if lo == f64::MAX {
            0.1
        } else {
            (lo * 0.8).max(0.01)
        };
        let mut chart = ChartBuilder::on(root)
            .caption("latency CDF per balancer and class", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d((lo..hi * 1.25).log_scale(), 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc("latency (µs, log)")
            .y_desc("share of packets")
            .draw()?;
        for (i, r) in self.0.iter().enumerate() {
            for (class, dash) in [("priority", true), ("regular", false)] {
                let Some(pts) = r.report.latency_cdf.get(class) else {
                    continue;
                };
                if pts.is_empty() {
                    continue;
                }
                let c = color(i);
                let data: Vec<(f64, f64)> =
                    pts.iter().map(|(v, q)| (*v as f64 / 1e3, *q)).collect();
                let style = if dash {
                    c.stroke_width(1)
                } else {
                    c.stroke_width(2)
                };
                chart
                    .draw_series(LineSeries::new(data, style))?
                    .label(format!("{} {class}", r.label))
                    .legend(move |(x, y)| {
                        PathElement::new(
                            vec![(x, y), (x + 20, y)],
                            if dash {
                                c.stroke_width(1)
                            } else {
                                c.stroke_width(2)
                            },
                        )
                    });
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    }
}

/// (max − min) / min of the working cores' loads in one period (0 when idle).
pub fn period_imbalance(load: &[f64], working: usize) -> f64 {
    let w = &load[..working.min(load.len())];
    let max = w.iter().copied().fold(0.0, f64::max);
    let min = w.iter().copied().fold(f64::MAX, f64::min);
    if min > 0.0 && min < f64::MAX {
        (max - min) / min
    } else {
        0.0
    }
}

struct Imbalance<'a>(&'a [Labeled<'a>]);

impl Draw for Imbalance<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res<DB> {
        let series: Vec<Vec<(f64, f64)>> = self
            .0
            .iter()
            .map(|r| {
                let w = r.report.cores["working"];
                r.report
                    .load_over_time
                    .iter()
                    .map(|s| (s.t_ns as f64 / 1e6, 100.0 * period_imbalance(&s.load, w)))
                    .collect()
            })
            .collect();
        let t_end = series.iter().flatten().map(|p| p.0).fold(1e-3, f64::max);
        let y_max = series
            .iter()
            .flatten()
            .map(|p| p.1)
            .fold(1.0, f64::max)
            .min(1000.0);
        let mut chart = ChartBuilder::on(root)
            .caption(
                "load imbalance (max − min) / min over time",
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..t_end, 0f64..y_max * 1.05)?;
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("imbalance (%)")
            .draw()?;
        for (i, (r, s)) in self.0.iter().zip(series).enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    s.into_iter().map(|(x, y)| (x, y.min(y_max))),
                    c.stroke_width(2),
                ))?
                .label(r.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    }
}

struct Migrations<'a>(&'a [Labeled<'a>]);

impl Draw for Migrations<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Res<DB> {
        let keys = ["shard_moves", "offload_changes"];
        let n = self.0.len();
        let y_max = self
            .0
            .iter()
            .flat_map(|r| keys.iter().map(|k| r.report.migrations[*k]))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption("migrations per balancer", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(20)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..y_max * 1.2)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|_| String::new())
            .y_desc("count")
            .draw()?;
        // each group's name above it
        chart.draw_series(self.0.iter().enumerate().map(|(i, r)| {
            Text::new(
                r.label.clone(),
                (i as f64 + 0.1, y_max * 1.15),
                ("sans-serif", 14).into_font(),
            )
        }))?;
        for (k, key) in keys.iter().enumerate() {
            let c = color(k);
            chart
                .draw_series(self.0.iter().enumerate().map(|(i, r)| {
                    let x0 = i as f64 + 0.1 + 0.4 * k as f64;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + 0.38, r.report.migrations[*key] as f64)],
                        c.filled(),
                    )
                }))?
                .label(key.replace('_', " "))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    }
}

/// Writes every plot of a comparison into `dir`; returns the files written.
pub fn write_all(dir: &Path, runs: &[Labeled<'_>]) -> anyhow::Result<Vec<PathBuf>> {
    fonts()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut files = Vec::new();
    for r in runs {
        let name = format!("load_{}", r.label.replace([' ', '/', '×'], "_"));
        files.extend(write(dir, &name, (900, 420), &Heatmap(r))?);
    }
    files.extend(write(dir, "latency_cdf", (900, 520), &Cdf(runs))?);
    files.extend(write(dir, "imbalance", (900, 420), &Imbalance(runs))?);
    files.extend(write(dir, "migrations", (900, 420), &Migrations(runs))?);
    Ok(files)
}

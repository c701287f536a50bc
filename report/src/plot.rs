//! The plots, each one SVG document drawn by plotters: a title, axes with units, the data,
//! and a legend strip under the chart (outside the data, so it hides none of it).

use crate::{
    Goodput, Memory, MemoryPoint, ReportError, SpanKind, StepSpread, Sweep, Timeline, Verify,
};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Colours, shared with the tests that find data elements by their fill.
pub(crate) mod colour {
    use plotters::style::RGBColor;
    pub const COMPUTE: RGBColor = RGBColor(31, 119, 180);
    pub const COMM: RGBColor = RGBColor(255, 127, 14);
    pub const IDLE: RGBColor = RGBColor(199, 199, 199);
    pub const HBM: RGBColor = RGBColor(214, 39, 40);
    pub const FITS: RGBColor = RGBColor(44, 160, 44);
    pub const NO_FIT: RGBColor = RGBColor(127, 127, 127);
    pub const GOODPUT: RGBColor = RGBColor(31, 119, 180);
    pub const ETTR: RGBColor = RGBColor(148, 103, 189);
    pub const CONFIGURED: RGBColor = RGBColor(127, 127, 127);
    pub const BEST: RGBColor = RGBColor(44, 160, 44);
    pub const YOUNG: RGBColor = RGBColor(140, 86, 75);
    pub const DALY: RGBColor = RGBColor(227, 119, 194);
    pub const POINT: RGBColor = RGBColor(31, 119, 180);
    pub const DIAGONAL: RGBColor = RGBColor(160, 160, 160);
    pub const SAMPLES: RGBColor = RGBColor(31, 119, 180);
    pub const P50: RGBColor = RGBColor(44, 160, 44);
    pub const P95: RGBColor = RGBColor(255, 127, 14);
    pub const P99: RGBColor = RGBColor(214, 39, 40);
    /// Memory categories, bottom of the stack first; more categories reuse them in turn.
    pub const CATEGORIES: [RGBColor; 6] = [
        RGBColor(78, 121, 167),
        RGBColor(242, 142, 43),
        RGBColor(225, 87, 89),
        RGBColor(118, 183, 178),
        RGBColor(89, 161, 79),
        RGBColor(186, 176, 172),
    ];
}

const FONT: &str = "sans-serif";
const WIDTH: u32 = 960;
const LEGEND_PX: u32 = 34;
const GIB: f64 = (1u64 << 30) as f64;

/// Most stages the memory plot draws (evenly chosen, first and last included).
pub(crate) const MAX_MEMORY_STAGES: usize = 16;
/// Time buckets per stage for the memory plot; each keeps its highest sample.
pub(crate) const MEMORY_BUCKETS: usize = 480;
/// Most points of the Pareto plot numbered with their rank.
const NUMBERED: usize = 5;

fn draw_error<E: std::fmt::Display>(plot: &'static str) -> impl Fn(E) -> ReportError {
    move |e| ReportError::Draw {
        plot,
        message: e.to_string(),
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

/// A tick label with about three significant digits and no trailing zeros.
pub(crate) fn tick(v: &f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The axes of a chart over numbers: tick labels of about three significant digits, the two
/// axis descriptions (with their units), no light grid lines.
fn draw_axes<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    x_desc: &str,
    y_desc: &str,
    plot: &'static str,
) -> Result<(), ReportError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .axis_desc_style((FONT, 15))
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style((FONT, 14))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(draw_error(plot))?;
    Ok(())
}

/// How a legend entry marks its series.
#[derive(Clone, Copy)]
enum Mark {
    Block(RGBColor),
    Dot(RGBColor),
    Line(RGBColor),
}

/// A row of legend entries across the bottom strip.
fn legend(
    area: &DrawingArea<SVGBackend, Shift>,
    items: &[(String, Mark)],
    plot: &'static str,
) -> Result<(), ReportError> {
    let y = (LEGEND_PX / 2) as i32;
    let mut x = 70i32;
    for (label, mark) in items {
        match *mark {
            Mark::Block(c) => area.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled())),
            Mark::Dot(c) => area.draw(&Circle::new((x + 6, y), 4, c.filled())),
            Mark::Line(c) => area.draw(&PathElement::new(
                vec![(x, y), (x + 14, y)],
                c.stroke_width(2),
            )),
        }
        .map_err(draw_error(plot))?;
        area.draw(&Text::new(
            label.clone(),
            (x + 18, y - 8),
            (FONT, 15).into_font(),
        ))
        .map_err(draw_error(plot))?;
        x += 30 + 7 * label.chars().count() as i32;
    }
    Ok(())
}

/// Draws into an SVG of `size` with `draw(chart area, legend strip)` and returns the document.
fn svg_document(
    size: (u32, u32),
    plot: &'static str,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend, Shift>,
        &DrawingArea<SVGBackend, Shift>,
    ) -> Result<(), ReportError>,
) -> Result<String, ReportError> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error(plot))?;
        let (chart, strip) = root.split_vertically(size.1.saturating_sub(LEGEND_PX));
        draw(&chart, &strip)?;
        root.present().map_err(draw_error(plot))?;
    }
    Ok(buf)
}

/// Per-stage timeline: one row per stage, a bar per span coloured by kind (compute, exposed
/// communication, idle); time in ms across.
pub fn timeline_svg(t: &Timeline) -> Result<String, ReportError> {
    const P: &str = "timeline";
    if t.stages.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no stage has a timeline".into(),
        });
    }
    let n = t.stages.len();
    let height = (140 + 30 * n as u32).max(240);
    let x_max = ms(t.step_time_ns).max(1e-6);
    let labels: Vec<String> = t
        .stages
        .iter()
        .map(|s| format!("stage {} (rank {})", s.stage, s.rank))
        .collect();
    // Row i is drawn at y = n - 1 - i: the first stage on top.
    let label_of = |v: &f64| {
        let i = v.round();
        if (v - i).abs() > 1e-6 || i < 0.0 || i >= n as f64 {
            return String::new();
        }
        labels.get(n - 1 - i as usize).cloned().unwrap_or_default()
    };
    svg_document((WIDTH, height), P, |area, strip| {
        let mut chart = ChartBuilder::on(area)
            .caption("Timeline of one step per pipeline stage", (FONT, 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(130)
            .build_cartesian_2d(0f64..x_max, -0.5f64..(n as f64 - 0.5))
            .map_err(draw_error(P))?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .axis_desc_style((FONT, 15))
            .disable_y_mesh()
            .y_labels(n.min(24))
            .y_label_formatter(&label_of)
            .x_label_formatter(&tick)
            .label_style((FONT, 14))
            .x_desc("time in the step (ms)")
            .y_desc("pipeline stage")
            .draw()
            .map_err(draw_error(P))?;
        for (i, stage) in t.stages.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            chart
                .draw_series(
                    stage
                        .spans
                        .iter()
                        .filter(|s| s.end_ns > s.start_ns)
                        .map(|s| {
                            Rectangle::new(
                                [(ms(s.start_ns), y - 0.38), (ms(s.end_ns), y + 0.38)],
                                span_colour(s.kind).filled(),
                            )
                        }),
                )
                .map_err(draw_error(P))?;
        }
        let items: Vec<(String, Mark)> = SpanKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), Mark::Block(span_colour(*k))))
            .collect();
        legend(strip, &items, P)
    })
}

pub(crate) fn span_colour(kind: SpanKind) -> RGBColor {
    match kind {
        SpanKind::Compute => colour::COMPUTE,
        SpanKind::ExposedComm => colour::COMM,
        SpanKind::Idle => colour::IDLE,
    }
}

/// The stages the memory plot draws: all of them up to [`MAX_MEMORY_STAGES`], else that many
/// evenly spaced, the first and the last included.
pub(crate) fn shown_stages(n: usize) -> Vec<usize> {
    if n <= MAX_MEMORY_STAGES {
        return (0..n).collect();
    }
    let k = MAX_MEMORY_STAGES;
    let mut v: Vec<usize> = (0..k).map(|i| i * (n - 1) / (k - 1)).collect();
    v.dedup();
    v
}

/// The samples a plot `buckets` wide keeps: in each time bucket of [0, end_ns], the sample
/// with the highest total (the first such), so no peak is lost; in time order.
pub(crate) fn downsample(
    samples: &[MemoryPoint],
    end_ns: u64,
    buckets: usize,
) -> Vec<&MemoryPoint> {
    let buckets = buckets.max(1) as u128;
    let span = u128::from(end_ns.max(1)) + 1;
    let mut out: Vec<&MemoryPoint> = Vec::new();
    let mut current: Option<u128> = None;
    for s in samples {
        let b = (u128::from(s.time_ns) * buckets / span).min(buckets - 1);
        match (current, out.last_mut()) {
            (Some(c), Some(last)) if c == b => {
                if s.total_bytes() > last.total_bytes() {
                    *last = s;
                }
            }
            _ => {
                out.push(s);
                current = Some(b);
            }
        }
    }
    out
}

/// Memory over the step: one chart per stage (small multiples on one scale), live memory
/// stacked by category as steps, the usable HBM as a red line, and where memory first
/// crossed it.
pub fn memory_svg(m: &Memory) -> Result<String, ReportError> {
    const P: &str = "memory";
    if m.stages.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no stage has memory samples".into(),
        });
    }
    let shown = shown_stages(m.stages.len());
    let cols = match shown.len() {
        1 => 1,
        2..=8 => 2,
        _ => 3,
    };
    let rows = shown.len().div_ceil(cols);
    let cell_h = 230u32;
    let height = 50 + cell_h * rows as u32 + LEGEND_PX;
    let end_ns = m
        .stages
        .iter()
        .flat_map(|s| s.samples.last().map(|p| p.time_ns))
        .chain([m.step_time_ns])
        .max()
        .unwrap_or(0)
        .max(1);
    let x_max = ms(end_ns);
    let peak = m
        .stages
        .iter()
        .flat_map(|s| s.samples.iter().map(MemoryPoint::total_bytes))
        .max()
        .unwrap_or(0);
    let y_max = gib(peak.max(m.hbm_bytes)).max(1e-9) * 1.08;
    let title = if shown.len() < m.stages.len() {
        format!(
            "Memory over the step per stage ({} of {} stages)",
            shown.len(),
            m.stages.len()
        )
    } else {
        "Memory over the step per stage".to_string()
    };
    svg_document((WIDTH, height), P, |area, strip| {
        let area = area.titled(&title, (FONT, 18)).map_err(draw_error(P))?;
        let cells = area.split_evenly((rows, cols));
        for (cell, &si) in cells.iter().zip(&shown) {
            let Some(stage) = m.stages.get(si) else {
                continue;
            };
            let mut chart = ChartBuilder::on(cell)
                .caption(
                    format!("stage {} (rank {})", stage.stage, stage.rank),
                    (FONT, 14),
                )
                .margin(8)
                .x_label_area_size(36)
                .y_label_area_size(54)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)
                .map_err(draw_error(P))?;
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .axis_desc_style((FONT, 15))
                .x_labels(6)
                .y_labels(6)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .x_desc("time (ms)")
                .y_desc("memory (GiB)")
                .label_style((FONT, 13))
                .draw()
                .map_err(draw_error(P))?;
            let kept = downsample(&stage.samples, end_ns, MEMORY_BUCKETS);
            for (c, colour) in (0..m.categories.len()).zip(colour::CATEGORIES.iter().cycle()) {
                if kept
                    .iter()
                    .all(|p| p.bytes.get(c).copied().unwrap_or(0) == 0)
                {
                    continue;
                }
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        stacked_band(&kept, c, end_ns),
                        colour.filled(),
                    )))
                    .map_err(draw_error(P))?;
            }
            let hbm = gib(m.hbm_bytes);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, hbm), (x_max, hbm)],
                    colour::HBM.stroke_width(2),
                )))
                .map_err(draw_error(P))?;
            if let Some(over) = &stage.over_hbm {
                let t = ms(over.time_ns);
                chart
                    .draw_series([PathElement::new(
                        vec![(t, 0.0), (t, y_max)],
                        colour::HBM.stroke_width(1),
                    )])
                    .map_err(draw_error(P))?;
                chart
                    .draw_series([Circle::new((t, hbm), 5, colour::HBM.filled())])
                    .map_err(draw_error(P))?;
                let anchor = if t > x_max / 2.0 {
                    Pos::new(HPos::Right, VPos::Bottom)
                } else {
                    Pos::new(HPos::Left, VPos::Bottom)
                };
                chart
                    .draw_series([Text::new(
                        format!("over HBM at {}", over.op),
                        (t, hbm),
                        (FONT, 11).into_font().color(&colour::HBM).pos(anchor),
                    )])
                    .map_err(draw_error(P))?;
            }
        }
        let mut items: Vec<(String, Mark)> = m
            .categories
            .iter()
            .zip(colour::CATEGORIES.iter().cycle())
            .map(|(c, col)| (c.clone(), Mark::Block(*col)))
            .collect();
        items.push(("usable HBM".into(), Mark::Line(colour::HBM)));
        legend(strip, &items, P)
    })
}

/// The band of category `c` in a stack of step functions: from the sum of the categories
/// below it up to that sum plus its own bytes, each sample held until the next (the last
/// until `end_ns`); in GiB against ms.
fn stacked_band(kept: &[&MemoryPoint], c: usize, end_ns: u64) -> Vec<(f64, f64)> {
    let below = |p: &MemoryPoint| -> u64 { p.bytes.iter().take(c).sum() };
    let own = |p: &MemoryPoint| p.bytes.get(c).copied().unwrap_or(0);
    let mut upper = Vec::with_capacity(kept.len() * 2);
    let mut lower = Vec::with_capacity(kept.len() * 2);
    for (i, p) in kept.iter().enumerate() {
        let t0 = ms(p.time_ns);
        let t1 = ms(kept.get(i + 1).map_or(end_ns.max(p.time_ns), |q| q.time_ns));
        let (lo, hi) = (gib(below(p)), gib(below(p) + own(p)));
        upper.push((t0, hi));
        upper.push((t1, hi));
        lower.push((t0, lo));
        lower.push((t1, lo));
    }
    upper.extend(lower.into_iter().rev());
    upper
}

/// The layouts on the Pareto front by increasing memory (the line's order).
pub(crate) fn pareto_front(s: &Sweep) -> Vec<usize> {
    let mut front: Vec<usize> = s
        .pareto
        .iter()
        .copied()
        .filter(|&i| i < s.points.len())
        .collect();
    front.sort_by_key(|&i| s.points[i].peak_bytes);
    front
}

/// A sweep's layouts: throughput against peak memory per GPU, filled where the layout fits
/// and hollow where it does not, the Pareto front of the fitting ones as a line, the usable
/// HBM as a red line, and the best layouts numbered.
pub fn pareto_svg(s: &Sweep) -> Result<String, ReportError> {
    const P: &str = "pareto";
    let pts: Vec<&crate::SweepPoint> = s
        .points
        .iter()
        .filter(|p| p.tokens_per_s.is_finite())
        .collect();
    if pts.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no layout was simulated".into(),
        });
    }
    let x_top = pts
        .iter()
        .map(|p| gib(p.peak_bytes))
        .chain(s.hbm_bytes.map(gib))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.08;
    let y_top = pts
        .iter()
        .map(|p| p.tokens_per_s / 1e3)
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let front = pareto_front(s);
    svg_document((WIDTH, 560), P, |area, strip| {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "Layouts: throughput against peak memory ({} layouts)",
                    pts.len()
                ),
                (FONT, 18),
            )
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_top, 0f64..y_top)
            .map_err(draw_error(P))?;
        draw_axes(
            &mut chart,
            "peak memory per GPU (GiB)",
            "throughput (thousand tokens/s)",
            P,
        )?;
        if let Some(h) = s.hbm_bytes {
            let x = gib(h);
            chart
                .draw_series([PathElement::new(
                    vec![(x, 0.0), (x, y_top)],
                    colour::HBM.stroke_width(2),
                )])
                .map_err(draw_error(P))?;
        }
        let xy = |p: &crate::SweepPoint| (gib(p.peak_bytes), p.tokens_per_s / 1e3);
        chart
            .draw_series([PathElement::new(
                front.iter().map(|&i| xy(&s.points[i])).collect::<Vec<_>>(),
                colour::FITS.stroke_width(2),
            )])
            .map_err(draw_error(P))?;
        chart
            .draw_series(pts.iter().map(|p| {
                if p.fits {
                    Circle::new(xy(p), 4, colour::FITS.filled())
                } else {
                    Circle::new(xy(p), 4, colour::NO_FIT.stroke_width(1))
                }
            }))
            .map_err(draw_error(P))?;
        chart
            .draw_series(
                s.top
                    .iter()
                    .take(NUMBERED)
                    .enumerate()
                    .filter_map(|(k, &i)| {
                        let p = s.points.get(i)?;
                        Some(Text::new(
                            format!("{}", k + 1),
                            xy(p),
                            (FONT, 13)
                                .into_font()
                                .color(&BLACK)
                                .pos(Pos::new(HPos::Left, VPos::Bottom)),
                        ))
                    }),
            )
            .map_err(draw_error(P))?;
        let mut items = vec![
            ("fits".to_string(), Mark::Dot(colour::FITS)),
            (
                "does not fit (hollow)".to_string(),
                Mark::Dot(colour::NO_FIT),
            ),
            ("Pareto front".to_string(), Mark::Line(colour::FITS)),
        ];
        if s.hbm_bytes.is_some() {
            items.push(("usable HBM".into(), Mark::Line(colour::HBM)));
        }
        items.push((
            format!("1-{}: best by {}", s.top.len().min(NUMBERED), s.objective),
            Mark::Line(WHITE),
        ));
        legend(strip, &items, P)
    })
}

/// One line of the goodput plot: its colour, its width, and (interval, estimate) points.
type Series = (RGBColor, u32, Vec<(f64, crate::Ci)>);

/// Goodput (and ETTR) against the checkpoint interval on a log axis, with their 95% intervals
/// as error bars, and the scenario's, the best, Young's and Daly's intervals as vertical lines.
pub fn goodput_svg(g: &Goodput) -> Result<String, ReportError> {
    const P: &str = "goodput";
    let pts: Vec<&crate::GoodputPoint> = g.points.iter().filter(|p| p.interval_steps > 0).collect();
    if pts.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no checkpoint interval was simulated".into(),
        });
    }
    let with_ettr = pts.iter().all(|p| p.ettr.is_some());
    let xs = pts.iter().map(|p| p.interval_steps as f64);
    let x_lo = xs.clone().fold(f64::INFINITY, f64::min) / 1.3;
    let x_hi = xs.fold(0.0, f64::max) * 1.3;
    let cis = pts
        .iter()
        .flat_map(|p| std::iter::once(p.goodput).chain(p.ettr.filter(|_| with_ettr)));
    let (lo, hi) = cis.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| {
        (lo.min(c.low), hi.max(c.high))
    });
    let pad = ((hi - lo) * 0.1).max(1e-3);
    let (y_lo, y_hi) = ((lo - pad).max(0.0), hi + pad);
    let markers: Vec<(String, f64, RGBColor)> = [
        (
            "scenario's interval",
            g.configured_steps as f64,
            colour::CONFIGURED,
        ),
        ("best", g.best_steps as f64, colour::BEST),
        ("Young", g.young_steps, colour::YOUNG),
        ("Daly", g.daly_steps, colour::DALY),
    ]
    .into_iter()
    .filter(|(_, x, _)| x.is_finite() && *x >= x_lo && *x <= x_hi)
    .map(|(l, x, c)| (l.to_string(), x, c))
    .collect();
    svg_document((WIDTH, 520), P, |area, strip| {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "Goodput against checkpoint interval ({:.0} h, {} seeds, 95% intervals)",
                    g.horizon_hours, g.seeds
                ),
                (FONT, 18),
            )
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), y_lo..y_hi)
            .map_err(draw_error(P))?;
        draw_axes(
            &mut chart,
            "checkpoint interval (steps, log scale)",
            "fraction of wall time",
            P,
        )?;
        for (_, x, c) in &markers {
            chart
                .draw_series([PathElement::new(
                    vec![(*x, y_lo), (*x, y_hi)],
                    c.stroke_width(1),
                )])
                .map_err(draw_error(P))?;
        }
        // Goodput first, ETTR over it, thinner and smaller: the two often nearly meet.
        let mut series: Vec<Series> = vec![(
            colour::GOODPUT,
            2,
            pts.iter()
                .map(|p| (p.interval_steps as f64, p.goodput))
                .collect(),
        )];
        if with_ettr {
            series.push((
                colour::ETTR,
                1,
                pts.iter()
                    .filter_map(|p| Some((p.interval_steps as f64, p.ettr?)))
                    .collect(),
            ));
        }
        for (c, width, line) in &series {
            chart
                .draw_series([PathElement::new(
                    line.iter().map(|(x, ci)| (*x, ci.mean)).collect::<Vec<_>>(),
                    c.stroke_width(*width),
                )])
                .map_err(draw_error(P))?;
            chart
                .draw_series(line.iter().map(|(x, ci)| {
                    PathElement::new(vec![(*x, ci.low), (*x, ci.high)], c.stroke_width(1))
                }))
                .map_err(draw_error(P))?;
            chart
                .draw_series(
                    line.iter()
                        .map(|(x, ci)| Circle::new((*x, ci.mean), 1 + *width, c.filled())),
                )
                .map_err(draw_error(P))?;
        }
        let mut items = vec![("goodput".to_string(), Mark::Dot(colour::GOODPUT))];
        if with_ettr {
            items.push(("ETTR".into(), Mark::Dot(colour::ETTR)));
        }
        for (l, x, c) in &markers {
            items.push((format!("{l} ({})", tick(x)), Mark::Line(*c)));
        }
        legend(strip, &items, P)
    })
}

/// Predicted against measured times, one point each, with the diagonal where they agree; log
/// axes when the times span more than two decades.
pub fn verify_svg(v: &Verify) -> Result<String, ReportError> {
    const P: &str = "verify";
    let pts: Vec<(f64, f64, &str)> = v
        .times
        .iter()
        .filter(|p| {
            p.predicted_s.is_finite()
                && p.measured_s.is_finite()
                && p.predicted_s > 0.0
                && p.measured_s > 0.0
        })
        .map(|p| (p.predicted_s * 1e3, p.measured_s * 1e3, p.label.as_str()))
        .collect();
    if pts.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no time was both predicted and measured".into(),
        });
    }
    let top = pts.iter().map(|p| p.0.max(p.1)).fold(0.0, f64::max) * 1.15;
    let bottom = pts
        .iter()
        .map(|p| p.0.min(p.1))
        .fold(f64::INFINITY, f64::min);
    let log = top / bottom > 100.0;
    let title = "Predicted against measured time";
    svg_document((WIDTH, 600), P, |area, strip| {
        if log {
            let range = (bottom / 1.5)..(top * 1.5);
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{title} (log axes)"), (FONT, 18))
                .margin(12)
                .x_label_area_size(42)
                .y_label_area_size(70)
                .build_cartesian_2d(range.clone().log_scale(), range.log_scale())
                .map_err(draw_error(P))?;
            verify_points(&mut chart, &pts, bottom / 1.5, top * 1.5)?;
        } else {
            let mut chart = ChartBuilder::on(area)
                .caption(title, (FONT, 18))
                .margin(12)
                .x_label_area_size(42)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..top, 0f64..top)
                .map_err(draw_error(P))?;
            verify_points(&mut chart, &pts, 0.0, top)?;
        }
        let items = vec![
            (
                "predicted = measured".to_string(),
                Mark::Line(colour::DIAGONAL),
            ),
            ("a compared time".to_string(), Mark::Dot(colour::POINT)),
        ];
        legend(strip, &items, P)
    })
}

fn verify_points<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    pts: &[(f64, f64, &str)],
    lo: f64,
    hi: f64,
) -> Result<(), ReportError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    const P: &str = "verify";
    draw_axes(chart, "predicted (ms)", "measured (ms)", P)?;
    chart
        .draw_series([PathElement::new(
            vec![(lo, lo), (hi, hi)],
            colour::DIAGONAL.stroke_width(1),
        )])
        .map_err(draw_error(P))?;
    chart
        .draw_series(
            pts.iter()
                .map(|(p, m, _)| Circle::new((*p, *m), 4, colour::POINT.filled())),
        )
        .map_err(draw_error(P))?;
    if pts.len() <= 16 {
        chart
            .draw_series(pts.iter().map(|(p, m, l)| {
                Text::new(
                    l.to_string(),
                    (*p, *m),
                    (FONT, 11)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Bottom)),
                )
            }))
            .map_err(draw_error(P))?;
    }
    Ok(())
}

/// Bins of the variability histogram: about the square root of the samples, at most this many.
pub(crate) const MAX_BINS: usize = 40;

/// The samples' counts in `bins` equal bins over `[lo, hi]` (the last bin closed).
pub(crate) fn histogram(samples: &[u64], lo: u64, hi: u64, bins: usize) -> Vec<u32> {
    let mut counts = vec![0u32; bins.max(1)];
    let width = (hi.saturating_sub(lo)) as f64 / counts.len() as f64;
    for &s in samples {
        let i = if width > 0.0 {
            ((s.saturating_sub(lo)) as f64 / width) as usize
        } else {
            0
        };
        let last = counts.len() - 1;
        if let Some(c) = counts.get_mut(i.min(last)) {
            *c += 1;
        }
    }
    counts
}

/// The step time over the samples: a histogram of the samples' step times, with vertical
/// lines at the step without variation (grey) and at P50, P95 and P99.
pub fn variability_svg(v: &StepSpread) -> Result<String, ReportError> {
    const P: &str = "variability";
    if v.samples_ns.is_empty() {
        return Err(ReportError::Empty {
            plot: P,
            why: "no samples".into(),
        });
    }
    let lo = v
        .samples_ns
        .iter()
        .copied()
        .min()
        .unwrap_or(0)
        .min(v.deterministic_ns);
    let hi = v
        .samples_ns
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(v.deterministic_ns);
    let bins = ((v.samples_ns.len() as f64).sqrt().ceil() as usize).clamp(1, MAX_BINS);
    let counts = histogram(&v.samples_ns, lo, hi, bins);
    let (x0, x1) = (ms(lo), ms(hi));
    let pad = ((x1 - x0) * 0.05).max(x1.abs() * 1e-3).max(1e-6);
    let width = (x1 - x0) / bins as f64;
    let top = f64::from(counts.iter().copied().max().unwrap_or(1)) * 1.15;
    svg_document((WIDTH, 480), P, |area, strip| {
        let mut chart = ChartBuilder::on(area)
            .caption("Step time over the samples", (FONT, 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(60)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..top)
            .map_err(draw_error(P))?;
        draw_axes(&mut chart, "step time (ms)", "samples", P)?;
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(i, &c)| {
                        let a = x0 + width * i as f64;
                        let b = if width > 0.0 { a + width } else { a + pad };
                        Rectangle::new([(a, 0.0), (b, f64::from(c))], colour::SAMPLES.filled())
                    }),
            )
            .map_err(draw_error(P))?;
        for (ns, c) in [
            (v.deterministic_ns, colour::DIAGONAL),
            (v.p50_ns, colour::P50),
            (v.p95_ns, colour::P95),
            (v.p99_ns, colour::P99),
        ] {
            chart
                .draw_series([PathElement::new(
                    vec![(ms(ns), 0.0), (ms(ns), top)],
                    c.stroke_width(2),
                )])
                .map_err(draw_error(P))?;
        }
        let items = vec![
            ("samples".to_string(), Mark::Block(colour::SAMPLES)),
            (
                "without variation".to_string(),
                Mark::Line(colour::DIAGONAL),
            ),
            ("P50".to_string(), Mark::Line(colour::P50)),
            ("P95".to_string(), Mark::Line(colour::P95)),
            ("P99".to_string(), Mark::Line(colour::P99)),
        ];
        legend(strip, &items, P)
    })
}

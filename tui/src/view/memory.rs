//! Pane 2, Memory: one rank's live device memory over the step against the HBM capacity,
//! the breakdown by category at its peak, and the out-of-memory verdict highlighted.

use super::{bytes, dim, fmt_ns};
use crate::state::App;
use crate::timeline::MemPoint;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph};
use ratatui::Frame;
use twin_sim::schedule::MemCategory;

const GIB: f64 = (1u64 << 30) as f64;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let out = &app.current;
    let t = &out.timeline;
    // The usable bytes (what the driver leaves a process), as the report's verdict.
    let hbm = out.report.usable_bytes;
    let [header, main] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    let Some(row) = t
        .rows
        .get(app.memory_row.min(t.rows.len().saturating_sub(1)))
    else {
        frame.render_widget(Paragraph::new(dim("no memory samples")), area);
        return;
    };
    let points: &[MemPoint] = t.memory.get(&row.rank).map_or(&[], |v| &v[..]);
    let peak = t.rank_peak(row.rank);
    let peak_bytes = peak.map_or(0, |p| p.total_bytes());
    let over = peak_bytes > hbm;
    let verdict = if over {
        Span::styled(
            format!(" OUT OF MEMORY by {} ", bytes(peak_bytes - hbm)),
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        )
    } else {
        Span::styled(
            format!(" fits, {} free ", bytes(hbm - peak_bytes)),
            Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        )
    };
    let fraction = if hbm > 0 {
        peak_bytes as f64 / hbm as f64 * 100.0
    } else {
        0.0
    };
    // The verdict first, so a narrow terminal never cuts it off.
    let mut lines = vec![Line::from(vec![
        verdict,
        Span::styled(
            format!(" rank {} (stage {})", row.rank, row.stage),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            " · peak {} of {} usable ({fraction:.0}%)",
            bytes(peak_bytes),
            bytes(hbm)
        )),
    ])];
    let mut second = String::from("↑↓ rank");
    if let Some(oom) = &out.report.oom {
        second = format!(
            "{second} · worst: rank {} crosses the usable bytes at {} in {}",
            oom.rank,
            fmt_ns((oom.time_s * 1e9).round() as u64),
            oom.op_name.as_deref().unwrap_or("-")
        );
    }
    lines.push(dim(second));
    frame.render_widget(Paragraph::new(lines), header);

    let [chart_area, breakdown] =
        Layout::horizontal([Constraint::Min(20), Constraint::Length(34)]).areas(main);
    // A snapshot's allocated bytes, by fraction of the measured step, over the predicted one.
    let snapshot = app.measured.as_ref().and_then(|m| m.snapshot.as_deref());
    draw_chart(
        frame,
        chart_area,
        (points, snapshot),
        (t.start_ns, t.end_ns),
        hbm,
        over,
    );
    draw_breakdown(frame, breakdown, peak);
}

/// A measured sample: (fraction of its step, allocated bytes).
type FractionBytes = (f64, u64);

/// A snapshot's (fraction of its step, allocated bytes) as a step function in GiB over
/// `0..x_max` ms: the measured step stretched onto the predicted one.
fn fraction_points(points: &[FractionBytes], x_max: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2 + 1);
    let mut prev = points.first().map_or(0.0, |p| p.1 as f64 / GIB);
    for &(f, b) in points {
        let x = f.clamp(0.0, 1.0) * x_max;
        let y = b as f64 / GIB;
        out.push((x, prev));
        out.push((x, y));
        prev = y;
    }
    out.push((x_max, prev));
    out
}

/// Memory as a step function in GiB over milliseconds since the step started.
fn step_points(points: &[MemPoint], origin_ns: u64, end_ns: u64) -> Vec<(f64, f64)> {
    let ms = |t: u64| t.saturating_sub(origin_ns) as f64 / 1e6;
    let mut out = Vec::with_capacity(points.len() * 2 + 1);
    let mut prev = 0.0;
    for p in points {
        let y = p.total_bytes() as f64 / GIB;
        out.push((ms(p.time_ns), prev));
        out.push((ms(p.time_ns), y));
        prev = y;
    }
    out.push((ms(end_ns), prev));
    out
}

fn draw_chart(
    frame: &mut Frame,
    area: Rect,
    (points, snapshot): (&[MemPoint], Option<&[FractionBytes]>),
    (origin_ns, end_ns): (u64, u64),
    hbm: u64,
    over: bool,
) {
    let data = step_points(points, origin_ns, end_ns);
    let x_max = (end_ns.saturating_sub(origin_ns) as f64 / 1e6).max(1e-6);
    let measured = snapshot.map_or_else(Vec::new, |s| fraction_points(s, x_max));
    let hbm_gib = hbm as f64 / GIB;
    let hbm_line = [(0.0, hbm_gib), (x_max, hbm_gib)];
    let y_max = data
        .iter()
        .chain(&measured)
        .map(|p| p.1)
        .fold(hbm_gib, f64::max)
        .max(1e-9)
        * 1.1;
    let hbm_style = if over {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::Yellow)
    };
    let mut datasets = vec![
        Dataset::default()
            .name("live")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(if over { Color::Red } else { Color::Cyan }))
            .data(&data),
        Dataset::default()
            .name("HBM")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(hbm_style)
            .data(&hbm_line),
    ];
    if !measured.is_empty() {
        datasets.push(
            Dataset::default()
                .name("measured")
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(Color::Magenta))
                .data(&measured),
        );
    }
    let label = |v: f64| Span::raw(format!("{v:.1}"));
    let chart = Chart::new(datasets)
        .block(Block::new().borders(Borders::ALL).title(" GiB over ms "))
        .x_axis(Axis::default().bounds([0.0, x_max]).labels(vec![
            label(0.0),
            label(x_max / 2.0),
            label(x_max),
        ]))
        .y_axis(Axis::default().bounds([0.0, y_max]).labels(vec![
            label(0.0),
            label(y_max / 2.0),
            label(y_max),
        ]));
    frame.render_widget(chart, area);
}

fn draw_breakdown(frame: &mut Frame, area: Rect, peak: Option<MemPoint>) {
    let block = Block::new().borders(Borders::ALL).title(" at peak ");
    let Some(p) = peak else {
        frame.render_widget(Paragraph::new(dim("no samples")).block(block), area);
        return;
    };
    let total = p.total_bytes().max(1);
    let bar_w = area.width.saturating_sub(24) as usize;
    let mut lines: Vec<Line> = MemCategory::ALL
        .iter()
        .zip(p.bytes)
        .map(|(cat, b)| {
            let n = ((b as f64 / total as f64) * bar_w as f64).round() as usize;
            Line::from(vec![
                Span::raw(format!("{:<11}{:>10} ", cat.name(), bytes(b))),
                Span::styled("█".repeat(n.min(bar_w)), Style::new().fg(Color::Cyan)),
            ])
        })
        .collect();
    lines.push(Line::from(Span::styled(
        format!("{:<11}{:>10}", "total", bytes(p.total_bytes())),
        Style::new().add_modifier(Modifier::BOLD),
    )));
    lines.push(dim(format!("at {}", fmt_ns(p.time_ns))));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

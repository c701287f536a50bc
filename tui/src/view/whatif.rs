//! Pane 4, What-if: the knobs with their values (changed ones marked), and step time, MFU,
//! bubble and memory of the edited scenario against the starting one. An edit the scenario
//! validator rejects shows its message instead.

use super::{bytes, delta, dim, fmt_ns, pct};
use crate::state::App;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [knobs, right] =
        Layout::horizontal([Constraint::Length(34), Constraint::Min(0)]).areas(area);
    draw_knobs(frame, knobs, app);
    let [results, notes] =
        Layout::vertical([Constraint::Length(10), Constraint::Min(0)]).areas(right);
    draw_results(frame, results, app);
    draw_notes(frame, notes, app);
}

fn draw_knobs(frame: &mut Frame, area: Rect, app: &App) {
    let w = &app.whatif;
    let lines: Vec<Line> = w
        .knobs
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let value = match (&w.editing, i == w.cursor) {
                (Some(buf), true) => format!("{buf}▏"),
                _ => k.value.text(),
            };
            let mark = if k.changed() { "*" } else { " " };
            let text = format!("{mark}{:<21}{value:>10}", k.label);
            let mut style = Style::new();
            if k.changed() {
                style = style.fg(Color::Yellow).add_modifier(Modifier::BOLD);
            }
            if i == w.cursor {
                style = style.add_modifier(Modifier::REVERSED);
            }
            Line::from(Span::styled(text, style))
        })
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" knobs ")),
        area,
    );
}

fn draw_results(frame: &mut Frame, area: Rect, app: &App) {
    let (b, c) = (&app.base.report, &app.current.report);
    let head = Line::from(Span::styled(
        format!("{:<12}{:>11}{:>11}{:>9}", "", "start", "now", "delta"),
        Style::new().add_modifier(Modifier::BOLD),
    ));
    let row = |name: &str, base: String, now: String, d: String| {
        let style = if d == "=" {
            Style::new()
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        Line::from(Span::styled(
            format!("{name:<12}{base:>11}{now:>11}{d:>9}"),
            style,
        ))
    };
    let (bs, cs) = (app.base.step_time_ns, app.current.step_time_ns);
    let fits = |f: bool| if f { "fits" } else { "OOM" }.to_string();
    let lines = vec![
        head,
        row(
            "step time",
            fmt_ns(bs),
            fmt_ns(cs),
            delta(bs as f64, cs as f64),
        ),
        row(
            "tokens/s",
            format!("{:.0}", b.tokens_per_s),
            format!("{:.0}", c.tokens_per_s),
            delta(b.tokens_per_s, c.tokens_per_s),
        ),
        row("MFU", pct(b.mfu), pct(c.mfu), delta(b.mfu, c.mfu)),
        row(
            "bubble",
            pct(b.bubble_fraction),
            pct(c.bubble_fraction),
            points(b.bubble_fraction, c.bubble_fraction),
        ),
        row(
            "exposed comm",
            pct(b.exposed_comm_fraction),
            pct(c.exposed_comm_fraction),
            points(b.exposed_comm_fraction, c.exposed_comm_fraction),
        ),
        row(
            "peak memory",
            bytes(b.peak_memory_bytes),
            bytes(c.peak_memory_bytes),
            delta(b.peak_memory_bytes as f64, c.peak_memory_bytes as f64),
        ),
        row(
            "memory",
            fits(b.fits),
            fits(c.fits),
            if b.fits == c.fits { "=" } else { "changed" }.into(),
        ),
    ];
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" result ")),
        area,
    );
}

fn draw_notes(frame: &mut Frame, area: Rect, app: &App) {
    let w = &app.whatif;
    let mut lines = Vec::new();
    if let Some(e) = &w.error {
        lines.push(Line::from(Span::styled(
            "not simulated: the edited scenario is invalid",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )));
        lines.push(Line::from(e.clone()));
        lines.push(dim("(the result above is the last valid one)"));
    } else if app.pending.is_some() {
        lines.push(dim("simulating…"));
    }
    let overrides = w.overrides();
    if !overrides.is_empty() {
        let set: Vec<String> = overrides.iter().map(|o| format!("--set {o}")).collect();
        lines.push(Line::from(set.join(" ")));
    }
    lines.push(dim(
        "↑↓ knob · ←→ change · Enter type a number · r reset · s save as new TOML",
    ));
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::new().borders(Borders::ALL).title(" edit ")),
        area,
    );
}

/// Change of a fraction in percentage points: "+12.6 pt"; "=" when equal.
fn points(base: f64, now: f64) -> String {
    if base == now {
        "=".to_string()
    } else {
        format!("{:+.1} pt", (now - base) * 100.0)
    }
}

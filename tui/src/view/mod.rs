//! The frame as a pure function of [`App`]: a tab bar, the active pane, a status line, and
//! the help overlay on top. One file per pane; `gantt` draws the timeline rows that the
//! Timeline and Compare panes share. Colours are the terminal's named colours (they follow
//! dark and light themes) and every op kind also has a letter, so frames read without colour.

mod compare;
mod faults;
mod gantt;
mod help;
mod memory;
mod timeline;
mod whatif;

use crate::state::{App, Pane};
use crate::timeline::OpClass;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Draws the whole UI.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let [tabs, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_tabs(frame, tabs, app);
    match app.pane {
        Pane::Timeline => timeline::draw(frame, body, app),
        Pane::Memory => memory::draw(frame, body, app),
        Pane::Compare => compare::draw(frame, body, app),
        Pane::WhatIf => whatif::draw(frame, body, app),
        Pane::Faults => faults::draw(frame, body, app),
    }
    draw_status(frame, status, app);
    if app.help {
        help::draw(frame, area);
    }
}

fn draw_tabs(frame: &mut Frame, area: Rect, app: &App) {
    let mut spans = Vec::new();
    for (i, p) in Pane::ALL.iter().enumerate() {
        let text = format!(" {} {} ", i + 1, p.title());
        spans.push(if *p == app.pane {
            Span::styled(
                text,
                Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
            )
        } else {
            Span::raw(text)
        });
    }
    spans.push(Span::styled(
        format!(" {} ", app.label),
        Style::new().add_modifier(Modifier::BOLD),
    ));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_status(frame: &mut Frame, area: Rect, app: &App) {
    let mut spans = Vec::new();
    if app.pending.is_some() {
        spans.push(Span::styled(
            " simulating… ",
            Style::new().add_modifier(Modifier::REVERSED),
        ));
    }
    if app.whatif.knobs.iter().any(|k| k.changed()) {
        spans.push(Span::styled(
            " edited ",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    if !app.status.is_empty() {
        spans.push(Span::raw(format!(" {} ", app.status)));
    }
    spans.push(Span::styled(
        " Tab/1-5 panes · ? help · q quit",
        Style::new().add_modifier(Modifier::DIM),
    ));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The colour of an op kind (named colours: they follow the terminal's theme).
pub fn class_color(c: OpClass) -> Color {
    match c {
        OpClass::Forward => Color::Blue,
        OpClass::Backward => Color::Green,
        OpClass::Recompute => Color::Yellow,
        OpClass::Optimizer => Color::Magenta,
        OpClass::TpComm => Color::Cyan,
        OpClass::DpComm => Color::Red,
        OpClass::PpComm => Color::LightMagenta,
        OpClass::OtherComm => Color::LightBlue,
        OpClass::Io => Color::Gray,
    }
}

/// A duration for people: "850 ns", "12.3 µs", "4.56 ms", "1.234 s".
pub fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.3} s", f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// A fraction as a percentage: "12.3%".
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Bytes in GiB or smaller units.
pub fn bytes(b: u64) -> String {
    twin_sim::schedule::fmt_bytes(b)
}

/// FLOPs for people: "3.4 TFLOP".
pub fn flops(f: u64) -> String {
    let x = f as f64;
    if x >= 1e12 {
        format!("{:.2} TFLOP", x / 1e12)
    } else if x >= 1e9 {
        format!("{:.2} GFLOP", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} MFLOP", x / 1e6)
    } else {
        format!("{f} FLOP")
    }
}

/// A short line of dim text.
pub fn dim(text: impl Into<String>) -> Line<'static> {
    Line::from(Span::styled(
        text.into(),
        Style::new().add_modifier(Modifier::DIM),
    ))
}

/// Signed change of `now` against `base`, relative, e.g. "+12.5%"; "=" when equal.
pub fn delta(base: f64, now: f64) -> String {
    if base == now {
        "=".to_string()
    } else if base != 0.0 && base.is_finite() && now.is_finite() {
        format!("{:+.1}%", (now / base - 1.0) * 100.0)
    } else {
        "n/a".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(fmt_ns(850), "850 ns");
        assert_eq!(fmt_ns(12_345), "12.3 µs");
        assert_eq!(fmt_ns(4_560_000), "4.56 ms");
        assert_eq!(fmt_ns(1_234_000_000), "1.234 s");
    }

    #[test]
    fn deltas_are_relative_and_signed() {
        assert_eq!(delta(2.0, 2.0), "=");
        assert_eq!(delta(2.0, 3.0), "+50.0%");
        assert_eq!(delta(2.0, 1.0), "-50.0%");
        assert_eq!(delta(0.0, 1.0), "n/a");
    }
}

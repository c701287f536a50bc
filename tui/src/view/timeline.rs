//! Pane 1, Timeline: the step as a Gantt chart, one row per rank (per stage when ranks were
//! collapsed), ops coloured by kind, bubbles as dots; the selected op's details below.

use super::gantt::{self, GanttRow};
use super::{bytes, dim, flops, fmt_ns, pct};
use crate::state::App;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;
use twin_sim::schedule::OpKind;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let [header, chart, axis, legend, details] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(4),
    ])
    .areas(area);
    let out = &app.current;
    let t = &out.timeline;
    let r = &out.report;
    let window = app.window();
    let zoom = t.span_ns().max(1) as f64 / window.1.saturating_sub(window.0).max(1) as f64;
    let mut head = vec![
        Span::styled(
            format!("step {}", fmt_ns(out.step_time_ns)),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            " · MFU {} · bubble {} · exp. comm {} · ×{zoom:.0}",
            pct(r.mfu),
            pct(r.bubble_fraction),
            pct(r.exposed_comm_fraction)
        )),
    ];
    if out.collapsed {
        head.push(Span::styled(
            " · 1 rank/stage",
            Style::new().add_modifier(Modifier::DIM),
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(head)), header);

    // Scroll so that the selected row is visible.
    // All rows when they fit one line each (gantt then picks how many lines each gets).
    let fit = (chart.height as usize).max(1);
    let sel = app.timeline.row.min(t.rows.len().saturating_sub(1));
    let first = sel.saturating_sub(fit - 1);
    let rows: Vec<GanttRow> = t
        .rows
        .iter()
        .enumerate()
        .skip(first)
        .take(fit)
        .map(|(i, row)| GanttRow {
            row,
            selected_span: if i == sel {
                app.timeline.selected
            } else {
                None
            },
            selected_row: i == sel,
        })
        .collect();
    gantt::draw(frame, chart, &rows, window);
    frame.render_widget(
        Paragraph::new(gantt::axis(axis.width, window, t.start_ns)),
        axis,
    );
    frame.render_widget(Paragraph::new(gantt::legend()), legend);
    frame.render_widget(
        Paragraph::new(detail_lines(app)).block(Block::new().borders(Borders::TOP).title(" op ")),
        details,
    );
}

fn detail_lines(app: &App) -> Vec<Line<'static>> {
    let t = &app.current.timeline;
    let row = t.rows.get(app.timeline.row);
    let span = row.and_then(|r| app.timeline.selected.and_then(|i| r.spans.get(i)));
    let (Some(row), Some(s)) = (row, span) else {
        return vec![dim(
            "n/p: select next/previous op · ↑↓ rank · +/- zoom · ←→ pan · 0 whole step",
        )];
    };
    let op = app.current.schedule.get_op(row.rank, s.op);
    let mut where_ = Vec::new();
    if let Some(o) = op {
        let l = &o.label;
        if l.num_layers > 0 {
            where_.push(format!(
                "layers {}-{}",
                l.first_layer,
                l.first_layer + l.num_layers - 1
            ));
            where_.push(format!("chunk {}", l.chunk));
        }
        if let Some(mb) = l.microbatch {
            where_.push(format!("micro batch {mb}"));
        }
        if let OpKind::Compute(c) = &o.kind {
            where_.push(format!("{} GEMMs", c.gemms.len()));
        }
    }
    vec![
        Line::from(vec![
            Span::styled(s.name.clone(), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!(
                " · {} · rank {} · stream {} · op #{}",
                s.class.name(),
                row.rank,
                s.stream.name(),
                s.op
            )),
        ]),
        Line::from(format!(
            "start {} · duration {} · bytes {} · {}",
            fmt_ns(s.start_ns.saturating_sub(t.start_ns)),
            fmt_ns(s.duration_ns()),
            bytes(s.bytes),
            flops(s.flops)
        )),
        Line::from(where_.join(" · ")),
    ]
}

//! Pane 3, Compare: predicted against measured. A table of step time, bubble, exposed
//! communication and peak memory (both sides computed by the same arithmetic from their
//! traces, or `twin verify`'s figures where its directory has them, with each CPU core's idle
//! time between ops on a host profile) with the ops whose own times differ most, then the two timelines one above the
//! other, for the same ranks and on the same time scale.

use super::gantt::{self, GanttRow};
use super::{bytes, dim, fmt_ns, pct};
use crate::measured::VerifyFigures;
use crate::state::App;
use crate::timeline::{Row, StepStats, Timeline};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

/// Ops matched by (rank, op index) whose own times (span less waiting for a shared core)
/// differ most, biggest first.
pub struct OpError {
    pub rank: u32,
    pub name: String,
    pub predicted_ns: u64,
    pub measured_ns: u64,
}

/// Matches ops of the same rank and op index; returns the `n` with the largest absolute
/// difference of own time ([`crate::timeline::Span::own_ns`]; ties by rank and op, so the
/// order is deterministic). On shared cores a predicted op runs stretched beside the
/// transfers that take its core, where the runtime runs it whole between them: spans would
/// compare the sharing, not the op (as `twin verify`'s op table does).
pub fn biggest_errors(predicted: &Timeline, measured: &Timeline, n: usize) -> Vec<OpError> {
    let mut out = Vec::new();
    for m in &measured.rows {
        let Some(p) = predicted.row_of_rank(m.rank) else {
            continue;
        };
        let by_op: std::collections::BTreeMap<u32, &crate::timeline::Span> =
            p.spans.iter().map(|s| (s.op, s)).collect();
        for s in &m.spans {
            if let Some(ps) = by_op.get(&s.op) {
                out.push((
                    s.op,
                    OpError {
                        rank: m.rank,
                        name: s.name.clone(),
                        predicted_ns: ps.own_ns(),
                        measured_ns: s.own_ns(),
                    },
                ));
            }
        }
    }
    out.sort_by(|(oa, a), (ob, b)| {
        let da = a.measured_ns.abs_diff(a.predicted_ns);
        let db = b.measured_ns.abs_diff(b.predicted_ns);
        db.cmp(&da).then(a.rank.cmp(&b.rank)).then(oa.cmp(ob))
    });
    out.into_iter().take(n).map(|(_, e)| e).collect()
}

/// [predicted, measured] bubble and exposed-communication fractions: `twin verify`'s, when the
/// measured step came with them (see [`VerifyFigures`]), else counted from the two traces alike.
fn fractions(ps: &StepStats, ms: &StepStats, figures: Option<&VerifyFigures>) -> [[f64; 2]; 2] {
    match figures {
        Some(f) => [f.bubble_fraction, f.exposed_comm_fraction],
        None => [
            [ps.bubble_fraction, ms.bubble_fraction],
            [ps.exposed_comm_fraction, ms.exposed_comm_fraction],
        ],
    }
}

/// (measured - predicted) / measured, as `twin verify` reports it: positive means the real run
/// was slower (or bigger) than predicted.
fn err_pct(predicted: f64, measured: f64) -> String {
    if measured != 0.0 {
        format!("{:+.1}%", (1.0 - predicted / measured) * 100.0)
    } else {
        "n/a".into()
    }
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let Some(m) = &app.measured else {
        frame.render_widget(
            Paragraph::new(vec![
                Line::from("No measured trace."),
                dim(
                    "Start with --measured FILE (a trace from `twin run --trace FILE` or \
                     `twin simulate --trace FILE`) or --measured DIR (from \
                     `twin verify step --trace-dir DIR`) to compare this prediction with a \
                     measured step.",
                ),
            ])
            .wrap(ratatui::widgets::Wrap { trim: true })
            .block(Block::new().borders(Borders::ALL).title(" Compare ")),
            area,
        );
        return;
    };
    let predicted = m.predicted.as_ref().unwrap_or(&app.current.timeline);
    let measured = &m.timeline;
    let (ps, ms) = (predicted.stats(), measured.stats());
    let [bubble, exposed] = fractions(&ps, &ms, m.figures.as_ref());
    let (bubble_label, exposed_label) = match m.figures {
        Some(_) => ("bubble (verify.json)", "exposed comm (verify.json)"),
        None => ("bubble", "exposed comm"),
    };
    let n_errors = if area.height >= 30 { 5 } else { 3 };
    let errors = biggest_errors(predicted, measured, n_errors);
    // The name column takes what the three figures leave, up to 48 columns.
    let nw = usize::from(area.width.saturating_sub(34)).clamp(16, 48);
    let w = |s: &str| format!("{s:<nw$.nw$}");
    let row = |name: &str, p: String, me: String, e: String| {
        Line::from(format!("{}{p:>12}{me:>12}{e:>10}", w(name)))
    };
    let mut lines = vec![
        Line::from(Span::styled(
            format!(
                "{}{:>12}{:>12}{:>10}",
                w(""),
                "predicted",
                "measured",
                "error"
            ),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        row(
            "step time",
            fmt_ns(ps.step_ns),
            fmt_ns(ms.step_ns),
            err_pct(ps.step_ns as f64, ms.step_ns as f64),
        ),
        row(
            bubble_label,
            pct(bubble[0]),
            pct(bubble[1]),
            format!("{:+.1} pt", (bubble[1] - bubble[0]) * 100.0),
        ),
        row(
            exposed_label,
            pct(exposed[0]),
            pct(exposed[1]),
            format!("{:+.1} pt", (exposed[1] - exposed[0]) * 100.0),
        ),
        row(
            "peak memory",
            bytes(ps.peak_memory_bytes),
            bytes(ms.peak_memory_bytes),
            err_pct(ps.peak_memory_bytes as f64, ms.peak_memory_bytes as f64),
        ),
    ];
    if let Some([p, me]) = m.figures.and_then(|f| f.core_idle_between_ops_s) {
        let ns = |s: f64| (s * 1e9).round().max(0.0) as u64;
        lines.push(row(
            "core idle between ops (verify.json)",
            fmt_ns(ns(p)),
            fmt_ns(ns(me)),
            err_pct(p, me),
        ));
    }
    if let Some([(pm, pn), (mm, mn)]) = m.figures.and_then(|f| f.collective_meetings) {
        lines.push(row(
            "collectives meeting on a core (verify.json)",
            format!("{pm}/{pn}"),
            format!("{mm}/{mn}"),
            format!("{:+}", mm as i64 - pm as i64),
        ));
    }
    for e in &errors {
        let name = format!("r{} {}", e.rank, e.name);
        lines.push(row(
            &name,
            fmt_ns(e.predicted_ns),
            fmt_ns(e.measured_ns),
            err_pct(e.predicted_ns as f64, e.measured_ns as f64),
        ));
    }
    let table_h = lines.len() as u16 + 1;
    let [table, top, bottom, axis] = Layout::vertical([
        Constraint::Length(table_h),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(area);
    let title = format!(" measured: {} ", m.label);
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::BOTTOM).title(title)),
        table,
    );
    // The same ranks on both sides, on one time scale.
    let ranks: Vec<u32> = measured
        .rows
        .iter()
        .map(|r| r.rank)
        .filter(|r| predicted.row_of_rank(*r).is_some())
        .collect();
    // Each side from its own start (a measured trace keeps the run's clock), one scale.
    let span = predicted.span_ns().max(measured.span_ns()).max(1);
    let from = |t: &Timeline| (t.start_ns, t.start_ns.saturating_add(span));
    draw_side(frame, top, "predicted", predicted, &ranks, from(predicted));
    draw_side(frame, bottom, "measured", measured, &ranks, from(measured));
    frame.render_widget(Paragraph::new(gantt::axis(axis.width, (0, span), 0)), axis);
}

fn draw_side(
    frame: &mut Frame,
    area: Rect,
    title: &str,
    t: &Timeline,
    ranks: &[u32],
    window: (u64, u64),
) {
    let [head, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(
            title.to_string(),
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        ))),
        head,
    );
    let rows: Vec<&Row> = ranks.iter().filter_map(|r| t.row_of_rank(*r)).collect();
    let rows: Vec<GanttRow> = rows
        .into_iter()
        .map(|row| GanttRow {
            row,
            selected_span: None,
            selected_row: false,
        })
        .collect();
    gantt::draw(frame, body, &rows, window);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::RawOp;
    use twin_sim::schedule::Stream;

    fn t(durs: &[(u32, u64)]) -> Timeline {
        let ops = durs.iter().map(|&(op, d)| RawOp {
            rank: 0,
            op,
            stream: Stream::Compute,
            name: format!("fwd {op}"),
            start_ns: 0,
            end_ns: d,
            bytes: 0,
            flops: 0,
            solo_ns: None,
        });
        Timeline::build(ops, &[], |_| 0)
    }

    #[test]
    fn errors_are_matched_by_op_and_sorted_by_size() {
        let p = t(&[(0, 100), (1, 100), (2, 100)]);
        let m = t(&[(0, 110), (1, 40), (2, 100), (3, 1000)]);
        let e = biggest_errors(&p, &m, 2);
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].name.as_str(), e[0].measured_ns), ("fwd 1", 40));
        assert_eq!((e[1].name.as_str(), e[1].measured_ns), ("fwd 0", 110));
    }

    #[test]
    fn errors_compare_own_times_not_the_waiting_for_a_shared_core() {
        // Op 0 was predicted 300 ns of span, 100 of it its own (it shared its core); measured
        // 110 ns alone. Op 1: 100 predicted, 160 measured of which 60 waiting.
        let solo = |t: &mut Timeline, op: u32, ns: u64| {
            for s in t.rows[0].spans.iter_mut().filter(|s| s.op == op) {
                s.solo_ns = Some(ns);
            }
        };
        let mut p = t(&[(0, 300), (1, 100)]);
        solo(&mut p, 0, 100);
        let mut m = t(&[(0, 110), (1, 160)]);
        solo(&mut m, 1, 100);
        let e = biggest_errors(&p, &m, 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].predicted_ns, e[0].measured_ns),
            ("fwd 0", 100, 110)
        );
        assert_eq!(
            (e[1].name.as_str(), e[1].predicted_ns, e[1].measured_ns),
            ("fwd 1", 100, 100)
        );
    }

    #[test]
    fn an_error_is_positive_when_the_run_was_slower_than_predicted() {
        // As `twin verify` reports it: (measured - predicted) / measured.
        assert_eq!(err_pct(90.0, 100.0), "+10.0%");
        assert_eq!(err_pct(110.0, 100.0), "-10.0%");
        assert_eq!(err_pct(5.0, 0.0), "n/a");
    }

    #[test]
    fn verify_figures_replace_the_counts_from_the_traces() {
        let stats = |b: f64, e: f64| StepStats {
            step_ns: 1,
            bubble_fraction: b,
            exposed_comm_fraction: e,
            peak_memory_bytes: 0,
        };
        let (ps, ms) = (stats(0.31, 0.24), stats(0.52, 0.18));
        assert_eq!(fractions(&ps, &ms, None), [[0.31, 0.52], [0.24, 0.18]]);
        let f = VerifyFigures {
            bubble_fraction: [0.57, 0.52],
            exposed_comm_fraction: [0.15, 0.18],
            core_idle_between_ops_s: None,
            collective_meetings: None,
        };
        assert_eq!(fractions(&ps, &ms, Some(&f)), [[0.57, 0.52], [0.15, 0.18]]);
    }
}

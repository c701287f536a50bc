//! Pane 5, Faults: for a scenario with `[faults]`, the long-horizon summary (goodput and
//! ETTR with their confidence intervals, failures, the checkpoint interval), where the lost
//! wall time went, one failure's recovery drawn to scale, and goodput over the checkpoint
//! intervals swept.

use super::dim;
use crate::state::App;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Sparkline};
use ratatui::Frame;
use twin_sim::faults::{Estimate, HorizonReport};

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let block = |t: &'static str| Block::new().borders(Borders::ALL).title(t);
    let h = match &app.current.horizon {
        None if app.current.faults.is_some() => {
            frame.render_widget(
                Paragraph::new(dim("simulating the horizon…")).block(block(" Faults ")),
                area,
            );
            return;
        }
        None => {
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from("This scenario has no [faults] section."),
                    dim("Add one (docs/reference/faults.md; e.g. scenarios/512xA100-faults.toml) to see"),
                    dim("goodput, lost time and recovery over a long run."),
                ])
                .block(block(" Faults ")),
                area,
            );
            return;
        }
        Some(Err(e)) => {
            frame.render_widget(
                Paragraph::new(vec![
                    Line::from(Span::styled(
                        "the horizon could not be simulated",
                        Style::new().fg(Color::Red),
                    )),
                    Line::from(e.clone()),
                ])
                .block(block(" Faults ")),
                area,
            );
            return;
        }
        Some(Ok(h)) => h,
    };
    let [top, recovery, sweep] = Layout::vertical([
        Constraint::Length(10),
        Constraint::Length(5),
        Constraint::Min(0),
    ])
    .areas(area);
    let [summary, lost] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(top);
    frame.render_widget(
        Paragraph::new(summary_lines(h)).block(block(" goodput ")),
        summary,
    );
    frame.render_widget(
        Paragraph::new(lost_lines(h, lost.width.saturating_sub(2))).block(block(" lost hours ")),
        lost,
    );
    frame.render_widget(
        Paragraph::new(recovery_lines(h, recovery.width.saturating_sub(2)))
            .block(block(" one failure, to scale ")),
        recovery,
    );
    if sweep.height >= 3 {
        // One bar per interval, widened to fill the pane.
        let inner = usize::from(sweep.width.saturating_sub(2));
        let rep = (inner / h.sweep.len().max(1)).max(1);
        let data: Vec<u64> = h
            .sweep
            .iter()
            .flat_map(|p| {
                let v = (p.goodput.mean.clamp(0.0, 1.0) * 1000.0).round() as u64;
                std::iter::repeat_n(v, rep)
            })
            .collect();
        let first = h.sweep.first().map_or(0, |p| p.interval_steps);
        let last = h.sweep.last().map_or(0, |p| p.interval_steps);
        let title = format!(" goodput over checkpoint intervals, {first} to {last} steps ");
        frame.render_widget(
            Sparkline::default()
                .data(&data)
                .style(Style::new().fg(Color::Green))
                .block(Block::new().borders(Borders::ALL).title(title)),
            sweep,
        );
    }
}

fn est(e: &Estimate, scale: f64, unit: &str) -> String {
    format!(
        "{:.1}{unit} [{:.1}, {:.1}]",
        e.mean * scale,
        e.ci_low * scale,
        e.ci_high * scale
    )
}

fn summary_lines(h: &HorizonReport) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    vec![
        Line::from(vec![
            Span::styled("goodput ", bold),
            Span::styled(est(&h.goodput, 100.0, "%"), bold),
        ]),
        Line::from(format!("ETTR    {}", est(&h.ettr, 100.0, "%"))),
        Line::from(format!(
            "{:.0} h horizon · {} trials · step {:.2} s",
            h.horizon_hours, h.seeds, h.step_time_s
        )),
        Line::from(format!(
            "failures/trial {}",
            est(&h.expected_failures, 1.0, "")
        )),
        Line::from(format!("MTTF {:.1} h", h.mttf_hours.mean)),
        Line::from(format!(
            "checkpoint every {} steps, {:.1} s stall",
            h.checkpoint_interval_steps, h.checkpoint_stall_s
        )),
        Line::from(format!(
            "best interval {} steps ({:.1}%)",
            h.best_interval_steps,
            h.best_interval_goodput * 100.0
        )),
        dim(format!(
            "Young {:.0} · Daly {:.0} steps",
            h.young_interval_steps, h.daly_interval_steps
        )),
    ]
}

fn lost_lines(h: &HorizonReport, width: u16) -> Vec<Line<'static>> {
    let l = &h.lost_hours;
    let items = [
        ("checkpoint", l.checkpoint),
        ("rework", l.rework),
        ("detection", l.detection),
        ("restart", l.restart),
        ("reload", l.reload),
        ("slowdown", l.slowdown),
    ];
    let max = items.iter().map(|i| i.1).fold(0.0, f64::max);
    let bar_w = width.saturating_sub(20) as f64;
    items
        .iter()
        .map(|(name, hours)| {
            let n = if max > 0.0 {
                (hours / max * bar_w).round() as usize
            } else {
                0
            };
            Line::from(vec![
                Span::raw(format!("{name:<11}{hours:>7.1} ")),
                Span::styled("█".repeat(n), Style::new().fg(Color::Red)),
            ])
        })
        .collect()
}

/// Detection, restart, reload and the redone work of an average failure, scaled to `width`.
fn recovery_lines(h: &HorizonReport, width: u16) -> Vec<Line<'static>> {
    let f = h.expected_failures.mean;
    let per = |hours: f64| if f > 0.0 { hours / f * 3600.0 } else { 0.0 };
    let l = &h.lost_hours;
    let parts = [
        ('d', "detect", per(l.detection), Color::Yellow),
        ('s', "restart", per(l.restart), Color::Magenta),
        ('l', "reload", per(l.reload), Color::Blue),
        ('w', "redo work", per(l.rework), Color::Red),
    ];
    let total: f64 = parts.iter().map(|p| p.2).sum();
    if total <= 0.0 {
        return vec![dim("no failure in any trial")];
    }
    let w = width.saturating_sub(2) as f64;
    let mut bar = vec![Span::styled("✗", Style::new().fg(Color::Red))];
    let mut labels = Vec::new();
    for (glyph, name, s, color) in parts {
        let n = ((s / total) * w).round().max(1.0) as usize;
        let text = format!("{glyph} {name} {s:.0}s");
        bar.push(Span::styled(
            glyph.to_string().repeat(n),
            Style::new().fg(Color::Black).bg(color),
        ));
        labels.push(Span::styled(
            format!("{text}  "),
            Style::new().fg(color).add_modifier(Modifier::BOLD),
        ));
    }
    vec![
        Line::from(bar),
        Line::from(labels),
        dim(format!(
            "mean over failures: {:.0} s lost each, then work resumes",
            total
        )),
    ]
}

//! Gantt rows for the Timeline and Compare panes: each terminal cell covers a slice of the
//! visible window and shows the op kind that fills most of it (compute first, then
//! communication), or a dim dot where the rank is idle (a bubble). With room, each rank gets
//! a second line for its communication streams, which compute would otherwise hide.

use super::{class_color, fmt_ns};
use crate::timeline::{OpClass, Row};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Width of the rank label in front of each row.
pub const LABEL_WIDTH: u16 = 10;

/// One drawn row: the rank, which of its spans is selected, and whether the row is.
pub struct GanttRow<'a> {
    pub row: &'a Row,
    pub selected_span: Option<usize>,
    pub selected_row: bool,
}

/// What one cell shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub class: Option<OpClass>,
    /// The cell overlaps the selected op.
    pub selected: bool,
}

/// Cells of one lane (the spans for which `keep` holds) over `[start, end)` in `width` cells.
pub fn lane(
    row: &Row,
    window: (u64, u64),
    width: usize,
    selected: Option<usize>,
    keep: impl Fn(OpClass) -> bool,
) -> Vec<Cell> {
    let (start, end) = window;
    let w = end.saturating_sub(start).max(1) as u128;
    let mut fill = vec![[0u64; OpClass::ALL.len()]; width];
    let mut sel = vec![false; width];
    if width == 0 {
        return Vec::new();
    }
    let cell_of = |t: u64| ((u128::from(t.saturating_sub(start)) * width as u128) / w) as usize;
    let cell_start = |i: usize| start + (i as u128 * w / width as u128) as u64;
    for (idx, s) in row.spans.iter().enumerate() {
        if !keep(s.class) || s.end_ns <= start || s.start_ns >= end || s.end_ns <= s.start_ns {
            continue;
        }
        let first = cell_of(s.start_ns.max(start));
        let last = cell_of(s.end_ns.min(end) - 1).min(width - 1);
        let k = OpClass::ALL.iter().position(|c| *c == s.class).unwrap_or(0);
        for i in first..=last {
            let a = cell_start(i).max(s.start_ns);
            let b = cell_start(i + 1).min(s.end_ns);
            // A span thinner than a cell still counts (at least 1 ns), so it shows.
            let slot = &mut fill[i][k];
            *slot = slot.saturating_add(b.saturating_sub(a).max(1));
            if selected == Some(idx) {
                sel[i] = true;
            }
        }
    }
    fill.iter()
        .zip(sel)
        .map(|(f, selected)| {
            let best = f
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                .map(|(k, _)| OpClass::ALL[k]);
            Cell {
                class: best,
                selected,
            }
        })
        .collect()
}

fn cell_span(c: Cell) -> Span<'static> {
    match c.class {
        Some(class) => {
            let mut style = Style::new().fg(Color::Black).bg(class_color(class));
            if c.selected {
                style = Style::new()
                    .fg(Color::White)
                    .bg(Color::Black)
                    .add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
            }
            Span::styled(class.glyph().to_string(), style)
        }
        None => Span::styled("·", Style::new().fg(Color::DarkGray)),
    }
}

/// The lanes a row can be split into when there is room: compute, then each kind of
/// communication the row has.
type Lane = (&'static str, fn(OpClass) -> bool);

const LANES: [Lane; 6] = [
    ("", OpClass::is_compute),
    ("  tp", |c| c == OpClass::TpComm),
    ("  dp", |c| c == OpClass::DpComm),
    ("  pp", |c| c == OpClass::PpComm),
    ("  cp/ep", |c| c == OpClass::OtherComm),
    ("  io", |c| c == OpClass::Io),
];

/// How many lines each rank gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Density {
    /// Compute where there is some, communication elsewhere.
    One,
    /// Compute, and all communication on a second line.
    Two,
    /// Compute, and one line per kind of communication the rank has.
    Full,
}

fn lanes_of(row: &Row) -> Vec<Lane> {
    LANES
        .iter()
        .enumerate()
        .filter(|(i, (_, keep))| *i == 0 || row.spans.iter().any(|s| keep(s.class)))
        .map(|(_, l)| *l)
        .collect()
}

/// The most detailed density at which `rows` fit in `height` lines.
pub fn density(rows: &[&Row], height: usize) -> Density {
    let full: usize = rows.iter().map(|r| lanes_of(r).len()).sum();
    if !rows.is_empty() && full <= height {
        Density::Full
    } else if !rows.is_empty() && rows.len() * 2 <= height {
        Density::Two
    } else {
        Density::One
    }
}

/// Draws `rows` (already scrolled to those that fit) into `area`.
pub fn draw(frame: &mut Frame, area: Rect, rows: &[GanttRow], window: (u64, u64)) {
    let width = area.width.saturating_sub(LABEL_WIDTH) as usize;
    let plain: Vec<&Row> = rows.iter().map(|g| g.row).collect();
    let density = density(&plain, area.height as usize);
    let mut lines: Vec<Line> = Vec::new();
    for g in rows {
        let label_style = if g.selected_row {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::new()
        };
        let label = format!("r{:<4}s{:<3}", g.row.rank, g.row.stage);
        let lane =
            |keep: &dyn Fn(OpClass) -> bool| lane(g.row, window, width, g.selected_span, keep);
        let sublabel = |text: &str| Span::raw(format!("{text:<w$.w$}", w = LABEL_WIDTH as usize));
        let mut rows_out: Vec<(Span, Vec<Cell>)> = Vec::new();
        let head = Span::styled(
            format!("{label:<w$.w$}", w = LABEL_WIDTH as usize),
            label_style,
        );
        match density {
            Density::One => {
                let comp = lane(&OpClass::is_compute);
                let comm = lane(&|c: OpClass| !c.is_compute());
                let merged = comp
                    .into_iter()
                    .zip(comm)
                    .map(|(a, b)| if a.class.is_some() { a } else { b })
                    .collect();
                rows_out.push((head, merged));
            }
            Density::Two => {
                rows_out.push((head, lane(&OpClass::is_compute)));
                rows_out.push((sublabel("  comm"), lane(&|c: OpClass| !c.is_compute())));
            }
            Density::Full => {
                for (i, (name, keep)) in lanes_of(g.row).into_iter().enumerate() {
                    let l = if i == 0 { head.clone() } else { sublabel(name) };
                    rows_out.push((l, lane(&keep)));
                }
            }
        }
        for (label, cells) in rows_out {
            let mut spans = vec![label];
            spans.extend(cells.into_iter().map(cell_span));
            lines.push(Line::from(spans));
        }
        if lines.len() >= area.height as usize {
            break;
        }
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// A time axis under the rows: ticks at the quarters of the window, labelled relative to
/// `origin_ns`.
pub fn axis(width: u16, window: (u64, u64), origin_ns: u64) -> Line<'static> {
    let w = width.saturating_sub(LABEL_WIDTH) as usize;
    let mut chars: Vec<char> = vec!['─'; w];
    let span = window.1.saturating_sub(window.0);
    let mut placed_to = 0usize;
    for q in 0..4u64 {
        let pos = (q as usize * w) / 4;
        let t = window.0.saturating_sub(origin_ns) + span * q / 4;
        let text: Vec<char> = format!("┬{}", fmt_ns(t)).chars().collect();
        if pos < placed_to || pos + text.len() > w {
            continue;
        }
        for (i, c) in text.iter().enumerate() {
            chars[pos + i] = *c;
        }
        placed_to = pos + text.len() + 1;
    }
    let mut s = format!("{:<w$}", "", w = LABEL_WIDTH as usize);
    s.extend(chars);
    Line::from(Span::styled(s, Style::new().add_modifier(Modifier::DIM)))
}

/// The key to the glyphs and colours.
pub fn legend() -> Line<'static> {
    let mut spans = Vec::new();
    for c in OpClass::ALL {
        spans.push(Span::styled(
            c.glyph().to_string(),
            Style::new().fg(Color::Black).bg(class_color(c)),
        ));
        spans.push(Span::raw(format!(" {} ", c.name())));
    }
    spans.push(Span::styled("·", Style::new().fg(Color::DarkGray)));
    spans.push(Span::raw(" idle"));
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Span as OpSpan;
    use twin_sim::schedule::Stream;

    fn span(class: OpClass, stream: Stream, a: u64, b: u64) -> OpSpan {
        OpSpan {
            op: 0,
            stream,
            class,
            name: String::new(),
            start_ns: a,
            end_ns: b,
            bytes: 0,
            flops: 0,
            solo_ns: None,
        }
    }

    #[test]
    fn cells_show_the_dominant_kind_and_bubbles() {
        let row = Row {
            rank: 0,
            stage: 0,
            spans: vec![
                span(OpClass::Forward, Stream::Compute, 0, 30),
                span(OpClass::Backward, Stream::Compute, 30, 40),
                span(OpClass::Backward, Stream::Compute, 80, 100),
            ],
        };
        let cells = lane(&row, (0, 100), 10, Some(2), OpClass::is_compute);
        let classes: String = cells
            .iter()
            .map(|c| c.class.map_or('.', OpClass::glyph))
            .collect();
        assert_eq!(classes, "FFFB....BB");
        assert_eq!(
            cells.iter().filter(|c| c.selected).count(),
            2,
            "the selected span covers cells 8 and 9"
        );
        // Zoomed into [30, 40): all backward.
        let zoomed = lane(&row, (30, 40), 5, None, OpClass::is_compute);
        assert!(zoomed.iter().all(|c| c.class == Some(OpClass::Backward)));
    }

    #[test]
    fn a_thin_op_still_shows() {
        let row = Row {
            rank: 0,
            stage: 0,
            spans: vec![span(OpClass::TpComm, Stream::Tp, 50, 51)],
        };
        let cells = lane(&row, (0, 100), 10, None, |c| !c.is_compute());
        assert_eq!(cells[5].class, Some(OpClass::TpComm));
        assert_eq!(cells.iter().filter(|c| c.class.is_some()).count(), 1);
    }

    #[test]
    fn rows_get_more_lines_when_there_is_room() {
        let row = Row {
            rank: 0,
            stage: 0,
            spans: vec![
                span(OpClass::Forward, Stream::Compute, 0, 10),
                span(OpClass::TpComm, Stream::Tp, 0, 10),
                span(OpClass::PpComm, Stream::PpSend, 10, 20),
            ],
        };
        let rows = [&row, &row];
        assert_eq!(lanes_of(&row).len(), 3, "compute, tp, pp");
        assert_eq!(density(&rows, 6), Density::Full);
        assert_eq!(density(&rows, 5), Density::Two);
        assert_eq!(density(&rows, 3), Density::One);
    }
}

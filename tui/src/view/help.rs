//! The `?` overlay: every key, by pane.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

pub const KEYS: [(&str, &str); 14] = [
    ("Tab / Shift-Tab / 1-5", "switch pane"),
    ("?", "this help (any key closes)"),
    ("q / Ctrl-C", "quit"),
    ("Timeline ↑↓ / j k", "select rank"),
    ("Timeline ←→ / h l", "pan"),
    ("Timeline + / -", "zoom in / out"),
    ("Timeline 0, Home, End", "whole step, start, end"),
    ("Timeline n p Enter", "select next / previous op"),
    ("Timeline Esc", "clear the selection"),
    ("Memory ↑↓", "select rank"),
    ("What-if ↑↓ / ←→", "select knob / change it"),
    ("What-if Enter", "type a number, Enter applies"),
    ("What-if r", "reset every knob"),
    ("What-if s", "save the edited scenario"),
];

pub fn draw(frame: &mut Frame, area: Rect) {
    let w = area.width.min(62);
    let h = area.height.min(KEYS.len() as u16 + 2);
    let rect = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(
                    format!("{k:<24}"),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*what),
            ])
        })
        .collect();
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" keys ")),
        rect,
    );
}

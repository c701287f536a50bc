//! The UI's only state transition: `update(state, msg) -> (state, effects)`. Keys and
//! simulation results come in as [`Msg`]; whatever needs the outside world (simulate, write a
//! file) goes out as an [`Effect`] for the event loop to carry out. Pure, so every key
//! sequence is testable without a terminal.

use crate::state::{App, KnobValue, Pane, Step};
use crate::worker::{Outcome, Request};

/// A key, as the UI sees it (the event loop maps terminal events to these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
    Tab,
    BackTab,
    Enter,
    Esc,
    Backspace,
}

#[derive(Debug)]
pub enum Msg {
    Key(Key),
    /// The worker's answer to request `id`.
    Simulated {
        id: u64,
        result: Box<Result<Outcome, String>>,
    },
    /// The faults horizon of the step that answered request `id`.
    Horizon {
        id: u64,
        result: Box<Result<twin_sim::faults::HorizonReport, String>>,
    },
    /// The edited scenario was written (the path), or why not.
    Saved(Result<String, String>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Simulate(Request),
    /// Write this scenario TOML to a new file beside the original.
    Save {
        toml: String,
    },
}

/// Applies one message.
pub fn update(mut app: App, msg: Msg) -> (App, Vec<Effect>) {
    let effects = match msg {
        Msg::Key(key) => on_key(&mut app, key),
        Msg::Simulated { id, result } => {
            on_result(&mut app, id, *result);
            Vec::new()
        }
        Msg::Horizon { id, result } => {
            if app.current_id == id {
                app.current.horizon = Some(*result);
            }
            Vec::new()
        }
        Msg::Saved(r) => {
            app.status = match r {
                Ok(path) => format!("saved {path}"),
                Err(e) => format!("save failed: {e}"),
            };
            Vec::new()
        }
    };
    (app, effects)
}

fn on_result(app: &mut App, id: u64, result: Result<Outcome, String>) {
    if app.pending != Some(id) {
        return; // superseded by a newer request
    }
    app.pending = None;
    match result {
        Ok(outcome) => {
            *app.current = outcome;
            app.current_id = id;
            app.whatif.error = None;
            app.timeline = crate::state::TimelineView {
                row: app
                    .timeline
                    .row
                    .min(app.current.timeline.rows.len().saturating_sub(1)),
                ..Default::default()
            };
            app.memory_row = app
                .memory_row
                .min(app.current.timeline.rows.len().saturating_sub(1));
        }
        Err(e) => app.whatif.error = Some(e),
    }
}

fn on_key(app: &mut App, key: Key) -> Vec<Effect> {
    if app.help {
        app.help = false;
        return Vec::new();
    }
    if app.whatif.editing.is_some() && app.pane == Pane::WhatIf {
        return edit_key(app, key);
    }
    match key {
        Key::Char('q') => {
            app.quit = true;
            return Vec::new();
        }
        Key::Char('?') => {
            app.help = true;
            return Vec::new();
        }
        Key::Tab => {
            app.pane = Pane::ALL[(app.pane.index() + 1) % Pane::ALL.len()];
            return Vec::new();
        }
        Key::BackTab => {
            app.pane = Pane::ALL[(app.pane.index() + Pane::ALL.len() - 1) % Pane::ALL.len()];
            return Vec::new();
        }
        Key::Char(c @ '1'..='5') => {
            let i = c as usize - '1' as usize;
            if let Some(p) = Pane::ALL.get(i) {
                app.pane = *p;
            }
            return Vec::new();
        }
        _ => {}
    }
    match app.pane {
        Pane::Timeline => {
            timeline_key(app, key);
            Vec::new()
        }
        Pane::Memory => {
            let rows = app.current.timeline.rows.len();
            app.memory_row = move_row(app.memory_row, rows, key);
            Vec::new()
        }
        Pane::WhatIf => whatif_key(app, key),
        Pane::Compare | Pane::Faults => Vec::new(),
    }
}

/// Row movement shared by the panes that list ranks.
fn move_row(row: usize, rows: usize, key: Key) -> usize {
    let last = rows.saturating_sub(1);
    match key {
        Key::Up | Key::Char('k') => row.saturating_sub(1),
        Key::Down | Key::Char('j') => (row + 1).min(last),
        Key::PageUp => row.saturating_sub(10),
        Key::PageDown => (row + 10).min(last),
        _ => row.min(last),
    }
}

fn timeline_key(app: &mut App, key: Key) {
    let t = &app.current.timeline;
    let full = t.span_ns().max(1);
    let v = &mut app.timeline;
    let window = if v.window_ns == 0 {
        full
    } else {
        v.window_ns.min(full)
    };
    let spans = |row: usize| t.rows.get(row).map_or(&[][..], |r| &r.spans[..]);
    match key {
        Key::Up | Key::Char('k') | Key::Down | Key::Char('j') | Key::PageUp | Key::PageDown => {
            let before = v
                .selected
                .and_then(|i| spans(v.row).get(i))
                .map(|s| s.start_ns);
            v.row = move_row(v.row, t.rows.len(), key);
            // Keep an op selected: the one of the new row that starts nearest.
            v.selected = before.and_then(|at| {
                spans(v.row)
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.start_ns.abs_diff(at))
                    .map(|(i, _)| i)
            });
        }
        Key::Left | Key::Char('h') => v.offset_ns = v.offset_ns.saturating_sub(window / 8),
        Key::Right | Key::Char('l') => {
            v.offset_ns = (v.offset_ns + window / 8).min(full - window);
        }
        Key::Char('+') | Key::Char('=') => {
            // Rounded up, so that zooming out (doubling) as often returns to the whole step
            // when the step's length is odd.
            let new = window.div_ceil(2).max(1);
            // Zoom around the selected op, or the window's centre.
            let focus = v
                .selected
                .and_then(|i| spans(v.row).get(i))
                .map(|s| s.start_ns.saturating_sub(t.start_ns) + s.duration_ns() / 2)
                .unwrap_or(v.offset_ns + window / 2);
            v.window_ns = new;
            v.offset_ns = focus.saturating_sub(new / 2).min(full - new);
        }
        Key::Char('-') => {
            let new = window.saturating_mul(2);
            if new >= full {
                v.window_ns = 0;
                v.offset_ns = 0;
            } else {
                let centre = v.offset_ns + window / 2;
                v.window_ns = new;
                v.offset_ns = centre.saturating_sub(new / 2).min(full - new);
            }
        }
        Key::Char('0') => {
            v.window_ns = 0;
            v.offset_ns = 0;
        }
        Key::Char('n') | Key::Enter | Key::Char('p') => {
            let n = spans(v.row).len();
            if n > 0 {
                let forward = key != Key::Char('p');
                v.selected = Some(match v.selected {
                    None if forward => first_visible(spans(v.row), t.start_ns + v.offset_ns),
                    None => n - 1,
                    Some(i) if forward => (i + 1).min(n - 1),
                    Some(i) => i.saturating_sub(1),
                });
                // Pan so that the selected op is in view.
                if let Some(s) = v.selected.and_then(|i| spans(v.row).get(i)) {
                    let rel = s.start_ns.saturating_sub(t.start_ns);
                    if rel < v.offset_ns || rel >= v.offset_ns + window {
                        v.offset_ns = rel.saturating_sub(window / 4).min(full - window);
                    }
                }
            }
        }
        Key::Esc => v.selected = None,
        Key::Home => v.offset_ns = 0,
        Key::End => v.offset_ns = full - window,
        _ => {}
    }
}

/// The first span starting at or after `at_ns` (the last one when none does).
fn first_visible(spans: &[crate::timeline::Span], at_ns: u64) -> usize {
    spans
        .iter()
        .position(|s| s.start_ns >= at_ns)
        .unwrap_or(spans.len().saturating_sub(1))
}

fn whatif_key(app: &mut App, key: Key) -> Vec<Effect> {
    let w = &mut app.whatif;
    let n = w.knobs.len();
    match key {
        Key::Up | Key::Char('k') => w.cursor = w.cursor.saturating_sub(1),
        Key::Down | Key::Char('j') => w.cursor = (w.cursor + 1).min(n.saturating_sub(1)),
        Key::Left | Key::Char('h') | Key::Right | Key::Char('l') => {
            let up = matches!(key, Key::Right | Key::Char('l'));
            if let Some(k) = w.knobs.get_mut(w.cursor) {
                k.value = stepped(&k.value, up);
                return resimulate(app);
            }
        }
        Key::Enter => {
            if let Some(KnobValue::Int(..)) = w.knobs.get(w.cursor).map(|k| &k.value) {
                w.editing = Some(String::new());
            }
        }
        Key::Char('r') => {
            for k in &mut w.knobs {
                k.value = k.base.clone();
            }
            return resimulate(app);
        }
        Key::Char('s') => return save(app),
        _ => {}
    }
    Vec::new()
}

/// Keys while a number is being typed into a knob.
fn edit_key(app: &mut App, key: Key) -> Vec<Effect> {
    let w = &mut app.whatif;
    let Some(buf) = w.editing.as_mut() else {
        return Vec::new();
    };
    match key {
        Key::Char(c) if c.is_ascii_digit() && buf.len() < 12 => buf.push(c),
        Key::Backspace => {
            buf.pop();
        }
        Key::Esc => w.editing = None,
        Key::Enter => {
            let typed = w.editing.take().unwrap_or_default();
            if let (Ok(v), Some(k)) = (typed.parse::<u64>(), w.knobs.get_mut(w.cursor)) {
                if let KnobValue::Int(old, step) = k.value {
                    let v = match step {
                        Step::One { max } => v.min(max),
                        Step::Double => v,
                    };
                    if v != old {
                        k.value = KnobValue::Int(v, step);
                        return resimulate(app);
                    }
                }
            }
        }
        _ => {}
    }
    Vec::new()
}

fn stepped(v: &KnobValue, up: bool) -> KnobValue {
    match *v {
        KnobValue::Int(x, Step::Double) => KnobValue::Int(
            if up {
                x.saturating_mul(2)
            } else {
                (x / 2).max(1)
            },
            Step::Double,
        ),
        KnobValue::Int(x, Step::One { max }) => KnobValue::Int(
            if up {
                (x + 1).min(max)
            } else {
                x.saturating_sub(1)
            },
            Step::One { max },
        ),
        KnobValue::Choice(i, names) => {
            let n = names.len().max(1);
            KnobValue::Choice(if up { (i + 1) % n } else { (i + n - 1) % n }, names)
        }
        KnobValue::Bool(b) => KnobValue::Bool(!b),
    }
}

/// Asks for a re-simulation of the knobs as they are now; it supersedes any in flight.
fn resimulate(app: &mut App) -> Vec<Effect> {
    let id = app.next_request;
    app.next_request += 1;
    app.pending = Some(id);
    vec![Effect::Simulate(Request {
        id,
        overrides: app.whatif.overrides(),
    })]
}

fn save(app: &mut App) -> Vec<Effect> {
    if app.pending.is_some() {
        app.status = "wait for the re-simulation to finish before saving".into();
        return Vec::new();
    }
    if app.whatif.error.is_some() {
        app.status = "cannot save: the edited scenario is not valid".into();
        return Vec::new();
    }
    vec![Effect::Save {
        toml: twin_sim::scenario::to_toml(&app.current.scenario),
    }]
}

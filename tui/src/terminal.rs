//! The real terminal: raw mode and the alternate screen, entered by [`TerminalGuard`] and left
//! when it drops (normal exit or error) or from a panic hook (panic), so the user's shell is
//! never left garbled. [`run`] is the event loop: draw, read keys, apply
//! [`crate::update::update`], carry out its effects.

use crate::state::App;
use crate::update::{update, Effect, Key, Msg};
use crate::worker::{Setup, Worker};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::prelude::CrosstermBackend;
use ratatui::Terminal;
use std::io::{stdout, Stdout};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
    #[error("the simulation worker stopped unexpectedly")]
    WorkerGone,
}

/// Raw mode + alternate screen while alive.
pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

/// Leaves raw mode and the alternate screen; safe to call more than once.
pub fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(stdout(), LeaveAlternateScreen, cursor::Show);
}

impl TerminalGuard {
    /// Enters raw mode and the alternate screen, and installs a panic hook that restores the
    /// terminal before the panic message is printed.
    pub fn enter() -> Result<TerminalGuard, TuiError> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        enable_raw_mode()?;
        if let Err(e) = execute!(stdout(), EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(e.into());
        }
        match Terminal::new(CrosstermBackend::new(stdout())) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                restore();
                Err(e.into())
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Runs the UI until `q`. `save_stem` names the file the edited scenario is saved beside
/// (`<stem>-whatif.toml`, `-whatif-2.toml`, ...).
pub fn run(app: App, setup: Setup, save_stem: PathBuf) -> Result<(), TuiError> {
    let (tx, rx) = std::sync::mpsc::channel::<Msg>();
    let worker = Worker::spawn(setup, tx.clone())?;
    let mut guard = TerminalGuard::enter()?;
    let result = event_loop(app, &mut guard, &worker, &rx, |toml| {
        // The emitter writes the resolved scenario only: keep the file's [faults] and
        // [checks] sections with it.
        let toml = match std::fs::read_to_string(&save_stem) {
            Ok(original) => twin_sim::scenario::with_side_sections(&toml, &original),
            Err(_) => toml,
        };
        let _ = tx.send(Msg::Saved(save_new(&save_stem, &toml)));
    });
    drop(guard);
    drop(worker);
    result
}

fn event_loop(
    mut app: App,
    guard: &mut TerminalGuard,
    worker: &Worker,
    rx: &Receiver<Msg>,
    save: impl Fn(String),
) -> Result<(), TuiError> {
    let mut dirty = true;
    while !app.quit {
        if dirty {
            guard.terminal.draw(|f| crate::view::draw(f, &app))?;
            dirty = false;
        }
        let mut msgs = Vec::new();
        if event::poll(Duration::from_millis(30))? {
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
                        return Ok(());
                    }
                    if let Some(key) = map_key(k.code) {
                        msgs.push(Msg::Key(key));
                    }
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        loop {
            match rx.try_recv() {
                Ok(m) => msgs.push(m),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err(TuiError::WorkerGone),
            }
        }
        for msg in msgs {
            let (next, effects) = update(app, msg);
            app = next;
            dirty = true;
            for e in effects {
                match e {
                    Effect::Simulate(r) => {
                        if !worker.request(r) {
                            return Err(TuiError::WorkerGone);
                        }
                    }
                    Effect::Save { toml } => save(toml),
                }
            }
        }
    }
    Ok(())
}

fn map_key(code: KeyCode) -> Option<Key> {
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Writes `toml` to the first free `<stem>-whatif[-N].toml` (never overwriting a file) and
/// returns its path as shown.
pub fn save_new(stem: &Path, toml: &str) -> Result<String, String> {
    use std::io::Write;
    let base = stem.with_extension("");
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "scenario".into());
    for n in 1..1000u32 {
        let suffix = if n == 1 {
            "-whatif".to_string()
        } else {
            format!("-whatif-{n}")
        };
        let path = base.with_file_name(format!("{name}{suffix}.toml"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(toml.as_bytes())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                return Ok(path.display().to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Err("no free file name".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saving_never_overwrites() {
        let dir = std::env::temp_dir().join(format!("twin-tui-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stem = dir.join("job.toml");
        let a = save_new(&stem, "a = 1\n").unwrap();
        let b = save_new(&stem, "b = 2\n").unwrap();
        assert!(a.ends_with("job-whatif.toml"), "{a}");
        assert!(b.ends_with("job-whatif-2.toml"), "{b}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "a = 1\n");
        std::fs::remove_dir_all(&dir).ok();
    }
}

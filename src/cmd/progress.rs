//! The progress bar a long command draws on standard error, only when it is a terminal:
//! `  LABEL [#####     ] done/total NOTE`, redrawn in place and safe to call from any thread.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Bar {
    label: &'static str,
    pub enabled: bool,
    drawn: AtomicBool,
}

impl Bar {
    /// A bar named `label`; never drawn when `quiet` or when stderr is not a terminal.
    pub fn new(label: &'static str, quiet: bool) -> Bar {
        Bar {
            label,
            enabled: !quiet && std::io::stderr().is_terminal(),
            drawn: AtomicBool::new(false),
        }
    }

    /// Redraws the bar at `done` of `total`.
    pub fn draw(&self, done: usize, total: usize, note: &str) {
        if !self.enabled {
            return;
        }
        let total = total.max(1);
        let filled = done.min(total) * 30 / total;
        eprint!(
            "\r  {} [{}{}] {done}/{total} {note}",
            self.label,
            "#".repeat(filled),
            " ".repeat(30 - filled)
        );
        self.drawn.store(true, Ordering::Relaxed);
    }

    /// Redraws at about every 2% of `total` (for work finished from many threads).
    pub fn step(&self, done: usize, total: usize, note: &str) {
        if done.is_multiple_of((total / 50).max(1)) || done == total {
            self.draw(done, total, note);
        }
    }

    /// Ends the bar's line, when one was drawn.
    pub fn finish(&self) {
        if self.drawn.load(Ordering::Relaxed) {
            eprintln!();
        }
    }
}

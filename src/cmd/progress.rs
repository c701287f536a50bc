//! The progress bar a long command draws on standard error (indicatif): its label, a bar, the
//! count, the rate and the time left, redrawn in place at most 10 times a second and safe to
//! update from any thread. Drawn only when standard error is a terminal and `--quiet` was not
//! given; otherwise every call does nothing and nothing is written.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

/// `--quiet` (a global flag): no command draws a bar.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Sets `--quiet` for the whole process.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given (notes about long work are left out too).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// The bar's line: `  LABEL [=====>    ] done/total  rate/s  ETA 12s  MESSAGE`. The bar takes
/// the width left, so the line never wraps.
const TEMPLATE: &str = "  {prefix} [{wide_bar}] {pos}/{len}  {per_sec:0}  ETA {eta}  {msg}";

pub struct Bar(ProgressBar);

impl Bar {
    /// A bar named `label` over `total` steps; hidden when `quiet` (or the global `--quiet`)
    /// or when stderr is not a terminal.
    pub fn new(label: &'static str, total: usize, quiet: bool) -> Bar {
        if quiet || QUIET.load(Ordering::Relaxed) || !std::io::stderr().is_terminal() {
            return Bar(ProgressBar::hidden());
        }
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(
            Some(total as u64),
            ProgressDrawTarget::stderr_with_hz(10),
        )
        .with_style(style)
        .with_prefix(label);
        Bar(bar)
    }

    /// Whether the bar is drawn at all.
    pub fn enabled(&self) -> bool {
        !self.0.is_hidden()
    }

    /// One more step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    /// `n` more steps done.
    pub fn inc_by(&self, n: u64) {
        self.0.inc(n);
    }

    /// `done` of `total` steps done, with `note` after the figures.
    pub fn set(&self, done: usize, total: usize, note: &str) {
        self.0.set_length(total as u64);
        self.0.set_position(done as u64);
        self.0.set_message(note.trim_end().to_string());
    }

    /// Draws the bar complete (without its message) and ends its line; the figures stay on
    /// screen. Nothing when it was never drawn.
    pub fn finish(&self) {
        if self.enabled() {
            self.0.set_message(String::new());
            self.0.finish();
        }
    }
}

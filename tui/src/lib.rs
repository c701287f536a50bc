//! twin-tui: the terminal UI of `twin tui`. People look here rather than read: the pipeline
//! timeline with its bubbles, memory over the step, predicted against measured, what-ifs
//! re-simulated live, and the cost of failures.
//!
//! Structure (state / update / view): [`state::App`] holds everything shown; [`update::update`]
//! is a pure function from (state, message) to (state, effects); [`view::draw`] is a pure
//! render of the state; [`worker`] re-simulates on a background thread so the UI never
//! freezes; [`terminal`] owns raw mode and the alternate screen and restores them on error
//! and on panic. [`timeline`] and [`measured`] turn traces (simulated, or read back from a
//! file) into what the panes draw.

pub mod measured;
pub mod state;
pub mod terminal;
pub mod timeline;
pub mod update;
pub mod view;
pub mod worker;

#[cfg(test)]
mod tests;

pub use state::App;
pub use update::{update, Effect, Key, Msg};
pub use worker::{compute, compute_step, Outcome, Request, Setup};

//! Tests of the whole UI without a terminal: frames of every pane rendered to ratatui's
//! `TestBackend` and compared with committed insta snapshots (`frames`), and key sequences
//! driven through `update` (`keys`). `fixtures` builds the states they start from.

mod fixtures;
mod frames;
mod keys;

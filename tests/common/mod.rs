//! Helpers every end-to-end test of the `twin` binary shares: run the built binary from the
//! repository root (so bundled scenario paths work) and read its output as text.
// Each test file uses its own subset.
#![allow(dead_code)]

use std::process::{Command, Output};

/// `twin ARGS` in the repository root.
pub fn twin(args: &[&str]) -> Output {
    twin_env(args, &[])
}

/// `twin ARGS` in the repository root with extra environment variables.
pub fn twin_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the twin binary runs")
}

/// Bytes of output as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The process's stdout as text.
pub fn stdout(o: &Output) -> String {
    text(&o.stdout)
}

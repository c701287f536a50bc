//! Helpers every end-to-end test of the `twin` binary shares: run the built binary from the
//! repository root (so bundled scenario paths work) and read its output as text.
// Each test file uses its own subset.
#![allow(dead_code)]

pub mod tmux;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

/// Prefix of every test binary's scratch directory under the system temp dir.
const SCRATCH_PREFIX: &str = "twin-e2e-";

/// This test binary's scratch directory, `$TMPDIR/twin-e2e-TAG-PID`, created on first use.
/// The tests of one binary share it while they run in parallel, so none of them can remove it
/// at its end; instead the first call of a run removes the directories of earlier runs whose
/// process is gone, so scratch space does not pile up run after run.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static SWEEP: Once = Once::new();
    let root = std::env::temp_dir();
    SWEEP.call_once(|| remove_stale(&root));
    let dir = root.join(format!("{SCRATCH_PREFIX}{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes `twin-e2e-*-PID` directories whose process no longer runs (Linux: `/proc/PID`).
fn remove_stale(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(SCRATCH_PREFIX) else {
            continue;
        };
        let pid = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

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

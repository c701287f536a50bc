//! Subcommands. Each module owns its clap arguments and a `run` that returns an exit code.

pub mod bench;
// issue 6: calibration
pub mod calibrate;
pub mod doctor;
pub mod run;
pub mod simulate;
pub mod validate;
// issue 7: recovery verification (to fold into `verify --faults`)
pub mod verify_faults;
// issue 9: CI checks and layout search
pub mod check;
pub mod diff;
pub mod sweep;
// issue 6: prediction against measurement
pub mod verify;
// issue 8: terminal UI
pub mod tui;

use std::path::Path;
use std::process::ExitCode;
use twin_sim::scenario::{Scenario, ScenarioError};

/// Output for people (`text`) or for machines (`json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Load a scenario with `--set` overrides. The error already names file, line, key and value.
pub fn load_scenario(path: &Path, overrides: &[String]) -> anyhow::Result<Scenario> {
    Ok(twin_sim::scenario::load(path, overrides)?)
}

/// Bad input (a scenario, a profile, or an argument) exits 2; everything else 1.
pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.chain().any(|c| {
        c.downcast_ref::<ScenarioError>().is_some()
            || c.downcast_ref::<twin_sim::profile::GpuMismatch>().is_some()
    }) {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// Write `text` to `path` atomically (temp file + rename), so a crash never leaves half a file.
pub fn write_atomic(path: &Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.sync_all().ok();
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

//! Subcommands. Each module owns its clap arguments and a `run` that returns an exit code.

pub mod bench;
// issue 6: calibration
pub mod calibrate;
pub mod doctor;
mod pricing;
pub mod progress;
pub mod renamed;
// issue 39: pictures
pub mod report;
pub mod run;
pub mod simulate;
pub mod validate;
// issue 9: CI checks and layout search
pub mod check;
pub mod diff;
pub mod sweep;
// issue 6: prediction against measurement
pub mod verify;
mod verify_measured;
// issue 8: terminal UI
pub mod tui;

use std::path::Path;
use std::process::ExitCode;
use twin_calibration::verify::VerifyError;
use twin_runtime::job::JobError;
use twin_sim::scenario::{Scenario, ScenarioError};

/// Every subcommand's help: what it does, its examples, then usage and options. One screen;
/// the longer text is docs/reference/cli.md.
pub const HELP: &str =
    "{about-with-newline}\n{before-help}{usage-heading} {usage}\n\n{all-args}{after-help}";

/// Output for people (`text`) or for machines (`json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Load a scenario with `--set` overrides. The error already names file, line, key and value.
/// Warns on stderr about what its `model.hf_config` sets that twin does not model.
pub fn load_scenario(path: &Path, overrides: &[String]) -> anyhow::Result<Scenario> {
    let source = twin_sim::setup::ScenarioSource::read(path)?;
    let parsed = source.parse()?;
    let scenario = parsed.resolve(overrides)?;
    warn_hf_unmodelled(&source.origin, &parsed.hf_unmodelled(overrides)?);
    Ok(scenario)
}

/// The warning for keys of a Hugging Face config that the import read but does not model.
pub fn warn_hf_unmodelled(origin: &str, unmodelled: &[String]) {
    if !unmodelled.is_empty() {
        eprintln!(
            "warning: {origin}: model.hf_config sets what twin does not model; the prediction \
             ignores:\n  {}",
            unmodelled.join("\n  ")
        );
    }
}

/// The runtime's job error in `c`, also when a verification passes it on.
fn job_error<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a JobError> {
    c.downcast_ref::<JobError>()
        .or_else(|| c.downcast_ref::<VerifyError>().and_then(VerifyError::job))
}

/// Bad input (a scenario, a profile, or an argument) exits 2; a launch stopped by SIGINT,
/// SIGTERM or SIGHUP exits 128 + the signal (as the shell reports a process it killed);
/// everything else 1.
pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    let interrupted = err.chain().find_map(|c| match c.downcast_ref() {
        Some(twin_runtime::launch::LaunchError::Interrupted(sig)) => u8::try_from(128 + sig).ok(),
        _ => job_error(c)
            .and_then(JobError::interrupted_by)
            .and_then(|sig| u8::try_from(128 + sig).ok()),
    });
    if let Some(code) = interrupted {
        return ExitCode::from(code);
    }
    if err.chain().any(|c| {
        c.downcast_ref::<ScenarioError>().is_some()
            || c.downcast_ref::<twin_sim::profile::GpuMismatch>().is_some()
            || c.downcast_ref::<twin_sim::profile::bundled::PricingError>()
                .is_some_and(|e| matches!(e, twin_sim::profile::bundled::PricingError::Mismatch(_)))
            || c.downcast_ref::<output::OutputError>().is_some()
            || c.downcast_ref::<twin_sim::trace::RankOutOfLayout>()
                .is_some()
            || job_error(c).is_some_and(JobError::is_bad_input)
            || c.downcast_ref::<VerifyError>()
                .is_some_and(|e| matches!(e, VerifyError::Inject(_)))
            || c.downcast_ref::<twin_runtime::launch::InjectError>()
                .is_some()
            || c.downcast_ref::<twin_calibration::nccl_tests::ParseError>()
                .is_some()
            || c.downcast_ref::<twin_calibration::inputs::InputError>()
                .is_some_and(twin_calibration::inputs::InputError::is_bad_input)
            || c.downcast_ref::<twin_sim::engine::SimError>()
                .is_some_and(|e| {
                    matches!(
                        e,
                        twin_sim::engine::SimError::WorkTooLarge { .. }
                            | twin_sim::engine::SimError::TraceTooLarge { .. }
                    )
                })
    }) {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

pub use twin_runtime::job::{output, write_atomic, write_atomic_with};

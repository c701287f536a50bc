//! `twin verify step|recovery`: a prediction against a real run of the same schedule. The
//! work is `twin_calibration::verify`; this module parses arguments and prints.

use super::run::BackendKind;
use super::{load_scenario, Format};
use std::path::PathBuf;
use std::process::ExitCode;
use twin_calibration::verify::{recovery, step};
use twin_runtime::job::{fit::parse_timeout_s, Backend};
use twin_sim::json::Layout;

/// Compare a prediction with a real run: a step, or the recovery from a fault.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin verify step scenarios/host/pp.toml --profile scenarios/profiles/host-example.toml
  twin verify recovery scenarios/host/faults.toml

Details: docs/reference/cli.md#twin-verify"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Kind,
}

#[derive(clap::Subcommand)]
pub enum Kind {
    Step(StepArgs),
    Recovery(RecoveryArgs),
}

/// Compare a step's prediction (costed by --profile) with real runs of the same schedule.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin verify step scenarios/host/pp.toml --profile scenarios/profiles/host-example.toml
  twin verify step scenarios/host/tp-pp.toml --profile P --format json --trace-dir out/
  twin verify step scenarios/host/pp.toml --profile P --max-step-time-error 0.05
  twin verify step S.toml --profile P --measured step.trace.json.gz --memory-snapshot s.pickle.gz

Errors are (measured - predicted) / measured; exits 1 when one exceeds a --max-* threshold.
Details (machine check, critical paths, core activity): docs/reference/cli.md#twin-verify-step"
)]
pub struct StepArgs {
    /// Scenario TOML file (CPU-sized ones are in scenarios/host/).
    pub scenario: PathBuf,
    /// host: CPU processes over TCP; cuda: the local GPU (one-rank scenarios).
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// Hardware profile TOML that costs the prediction (docs/reference/profiles.md).
    #[arg(long, value_name = "FILE")]
    pub profile: PathBuf,
    /// Measured steps per run, after the warm-up.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// Steps run first and left out of the measurement.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub warmup: u32,
    /// Runs (fresh launches); the median step over all.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Override a scenario key (TOML value syntax). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write both traces and verify.json into DIR.
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
    /// Fail when |step time error| exceeds F (0.05 = 5%).
    #[arg(long, value_name = "F", value_parser = non_negative)]
    pub max_step_time_error: Option<f64>,
    /// Fail when the worst |peak memory error| exceeds F.
    #[arg(long, value_name = "F", value_parser = non_negative)]
    pub max_peak_memory_error: Option<f64>,
    /// Fail when |bubble error| exceeds P percentage points.
    #[arg(long, value_name = "P", value_parser = non_negative)]
    pub max_bubble_error_points: Option<f64>,
    /// Longest a rank waits for a peer (at most 86400 s).
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout_s)]
    pub timeout_s: f64,
    /// A PyTorch profiler trace (.json[.gz], or a directory of them) to compare with.
    #[arg(long, value_name = "TRACE")]
    pub measured: Option<PathBuf>,
    /// With --measured: a CUDA memory snapshot pickle (.gz) of that step.
    #[arg(long, value_name = "SNAPSHOT", requires = "measured")]
    pub memory_snapshot: Option<PathBuf>,
    /// With --measured: the rank compared.
    #[arg(long, default_value_t = 0, requires = "measured")]
    pub rank: u32,
    /// With --measured: the trace's step (0-based; default: the last).
    #[arg(long, value_name = "N", requires = "measured")]
    pub measured_step: Option<usize>,
    /// Also write an HTML report to FILE (predicted against measured).
    #[arg(long, value_name = "FILE", conflicts_with = "measured")]
    pub report: Option<PathBuf>,
}

/// Inject one kill into real host runs and compare the recovery with the simulator's model.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin verify recovery scenarios/host/faults.toml
  twin verify recovery scenarios/host/faults.toml --inject \"kill rank=3 at=step:7\" --repeat 5

Restart and reload are calibrated by separate runs with another kill.
Details: docs/reference/cli.md#twin-verify-recovery"
)]
pub struct RecoveryArgs {
    /// Scenario TOML file (a CPU-sized one, e.g. scenarios/host/faults.toml).
    pub scenario: PathBuf,
    /// host only: the recovery model is calibrated by host runs.
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// The fault, "kill rank=R at=step:S[,op:I]".
    #[arg(long, default_value = "kill rank=3 at=step:7")]
    pub inject: String,
    /// Checkpoint interval in steps (synchronous checkpoints).
    #[arg(long, default_value_t = 3)]
    pub checkpoint_every: u64,
    /// Steps of each fault run.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// Fault runs, and as many calibration runs; medians over them.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Override a scenario key (TOML value syntax). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Fail (exit 1) when |recovery time error| exceeds this fraction.
    #[arg(long, value_name = "F", default_value_t = 0.20, value_parser = non_negative)]
    pub max_recovery_error: f64,
    /// Longest a rank waits for a peer before giving up (as `twin run`; at most 86400).
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout_s)]
    pub timeout_s: f64,
}

/// A threshold: a finite number >= 0.
fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a number >= 0")),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Kind::Step(a) => verify_step(a),
        Kind::Recovery(a) => verify_recovery(a),
    }
}

fn verify_step(a: StepArgs) -> anyhow::Result<ExitCode> {
    if a.measured.is_some() {
        return super::verify_measured::run(a);
    }
    let spec = step::StepSpec {
        scenario: a.scenario,
        overrides: a.overrides,
        backend: Backend::from(a.backend),
        warmup: a.warmup,
        steps: a.steps,
        repeat: a.repeat,
        timeout_s: a.timeout_s,
        format: a.format.into(),
        trace_dir: a.trace_dir,
        thresholds: twin_sim::verify::Thresholds {
            step_time_error: a.max_step_time_error,
            peak_memory_error: a.max_peak_memory_error,
            bubble_error_points: a.max_bubble_error_points,
        },
    };
    super::output::prepare_dir(spec.trace_dir.as_deref(), "--trace-dir")?;
    super::output::check_file(a.report.as_deref(), "--report")?;
    let scenario = load_scenario(&spec.scenario, &spec.overrides)?;
    let profile = twin_sim::profile::load(&a.profile)?;
    let bar = super::progress::Bar::new("runs", spec.repeat as usize, spec.repeat < 2);
    let mut on_run = |i: u32, n: u32| bar.set(i as usize, n as usize, "");
    let out = step::verify_step(&spec, &scenario, &profile, &mut on_run);
    bar.finish();
    let out = out?;
    if let Some(path) = &a.report {
        let title = format!("twin verify step: {}", spec.scenario.display());
        super::report::write_html(path, &super::report::verify_report(&title, &out.comparison))?;
    }
    print!("{}", out.output);
    for v in &out.violations {
        eprintln!("verify failed: {v}");
    }
    Ok(ExitCode::from(u8::from(!out.violations.is_empty())))
}

fn verify_recovery(a: RecoveryArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.backend == BackendKind::Host,
        "verify recovery measures recoveries on the host backend only (its recovery model is calibrated by host runs), not --backend {}; run a CUDA recovery with `twin run --backend cuda --checkpoint-dir DIR --inject SPEC`",
        Backend::from(a.backend).name()
    );
    let scenario = load_scenario(&a.scenario, &a.overrides)?;
    let spec = recovery::RecoverySpec {
        scenario: a.scenario,
        overrides: a.overrides,
        steps: a.steps,
        checkpoint_every: a.checkpoint_every,
        inject: a.inject,
        repeats: a.repeat,
        timeout_s: a.timeout_s,
        tolerance: a.max_recovery_error,
    };
    let bar = super::progress::Bar::new("runs", spec.repeats as usize, false);
    let mut on_run = |i: u32, n: u32| bar.set(i as usize, n as usize, "");
    let c = recovery::verify_recovery(&spec, &scenario, &mut on_run);
    bar.finish();
    let c = c?;
    match a.format {
        Format::Json => println!(
            "{}",
            twin_sim::json::document_with_layout("verify-recovery", Layout::of(&scenario), &c)?
        ),
        Format::Text => print!("{}", c.to_text()),
    }
    Ok(ExitCode::from(u8::from(!c.pass)))
}

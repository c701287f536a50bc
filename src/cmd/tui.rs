//! `twin tui`: the terminal UI over one scenario (crate twin-tui). Arguments are checked and
//! the first simulation runs before the terminal is taken over, so a bad scenario prints its
//! error as usual.

use anyhow::Context;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// Explore a simulated step in the terminal: timeline, memory, compare, what-if, faults.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin tui scenarios/512xA100.toml
  twin tui scenarios/host/tp-pp.toml --measured run.trace.json
  twin tui scenarios/512xA100-faults.toml --set faults.seeds=50

Details: docs/reference/cli.md#twin-tui"
)]
pub struct Args {
    /// Scenario TOML file (see docs/reference/scenarios.md).
    pub scenario: PathBuf,
    /// A measured step to compare with: a trace file (`twin run --trace FILE`), a directory
    /// written by `twin verify step --trace-dir DIR`, or a PyTorch profiler trace.
    #[arg(long, value_name = "TRACE_OR_DIR")]
    pub measured: Option<PathBuf>,
    /// A CUDA memory snapshot of the measured step, drawn in the Memory pane.
    #[arg(long, value_name = "SNAP", requires = "measured")]
    pub memory_snapshot: Option<PathBuf>,
    /// Hardware profile TOML that prices the step; `defaults` for twin's A100-fitted
    /// defaults. Without it, the bundled profile of the machine, if any.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Override a scenario key (TOML value syntax), e.g. --set parallel.pp=16. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The terminal UI draws text only (for JSON: twin simulate --format json).
    #[arg(long, value_enum, default_value = "text")]
    pub format: TextOnly,
}

/// The one format of a command that draws for people only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextOnly {
    Text,
}

/// Allocated bytes over the snapshot's recorded window, as (fraction of it, bytes), of the
/// device with the highest peak.
fn snapshot_fractions(path: &std::path::Path) -> anyhow::Result<Vec<(f64, u64)>> {
    let snap = twin_measured::snapshot::read_snapshot(path)?;
    let device = snap
        .devices
        .iter()
        .max_by_key(|d| d.peak_allocated_bytes)
        .with_context(|| format!("{}: the snapshot holds no device", path.display()))?;
    let t = &device.timeline;
    let (start, end) = match (t.first(), t.last()) {
        (Some(a), Some(b)) => (a.time_us as f64, b.time_us as f64),
        _ => return Ok(Vec::new()),
    };
    let span = end - start;
    Ok(t.iter()
        .map(|p| {
            let f = if span > 0.0 {
                (p.time_us as f64 - start) / span
            } else {
                0.0
            };
            (f, p.allocated_bytes)
        })
        .collect())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !std::io::stdout().is_terminal() {
        eprintln!(
            "error: twin tui needs a terminal, and stdout is not one \
             (use `twin simulate` for pipes and files)"
        );
        return Ok(ExitCode::from(2));
    }
    let source = twin_sim::setup::ScenarioSource::read(&args.scenario)?;
    let parsed = source.parse()?;
    // Surface scenario errors (exit 2) before the terminal is taken over.
    parsed.resolve(&args.overrides)?;
    let pricing = super::pricing::from_arg(args.profile.as_deref())?;
    let setup = twin_tui::Setup {
        source: parsed,
        base_overrides: args.overrides.clone(),
        pricing,
        // A measured trace has every rank; so must the prediction it is compared with.
        collapse: args.measured.is_none(),
    };
    let base = twin_tui::compute(&setup, &[])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("simulating {}", args.scenario.display()))?;
    let measured = match &args.measured {
        Some(path) => {
            let plan = twin_sim::plan::Plan::new(&base.scenario)?;
            let stage_of = |r: u32| if r < plan.world { plan.stage_of(r) } else { 0 };
            match twin_tui::measured::load(path, &stage_of) {
                Ok(mut m) => {
                    if let Some(snap) = &args.memory_snapshot {
                        m.snapshot = Some(snapshot_fractions(snap)?);
                    }
                    Some(m)
                }
                Err(e) => {
                    eprintln!("error: --measured: {e}");
                    return Ok(ExitCode::from(2));
                }
            }
        }
        None => None,
    };
    let label = args
        .scenario
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let app = twin_tui::App::new(label, base, measured);
    twin_tui::terminal::run(app, setup, args.scenario.clone())?;
    Ok(ExitCode::SUCCESS)
}

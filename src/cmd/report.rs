//! `twin report`: one self-contained HTML report of a scenario (headline, per-stage timeline,
//! memory over the step, goodput when the scenario has `[faults]`, the step time's spread when
//! it has `[variability]`), or one SVG plot; and
//! `--report FILE` of `simulate`, `sweep` and `verify step`. The data and the drawing are the
//! `twin-report` crate's.

use super::{write_atomic, HELP};
use anyhow::Context;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use twin_report as rep;
pub use twin_report::from_sim::{simulation_report, sweep_report, verify_report};
use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::simulation::{self, Simulation};
use twin_sim::sweep::{Objective, SweepPlan, SweepRequest};

/// Draw a scenario's prediction: one HTML report, or one SVG plot.
#[derive(clap::Args)]
#[command(
    help_template = HELP,
    before_help = "Examples:
  twin report scenarios/512xA100.toml -o report.html
  twin report scenarios/512xA100.toml --plot memory -o memory.svg
  twin report scenarios/512xA100-faults.toml --plot goodput -o goodput.svg
  twin report scenarios/512xA100.toml --plot pareto -o layouts.svg   (runs a layout search)
  twin simulate S.toml --report r.html   (also: sweep, verify step, simulate --horizon)

Details: docs/reference/cli.md#twin-report"
)]
pub struct Args {
    /// Scenario TOML file (docs/reference/scenarios.md).
    pub scenario: PathBuf,
    /// Where to write: default report.html, or PLOT.svg with --plot; `-` for stdout.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// text: the report's figures as text; html: the whole report; svg: the one plot --plot names.
    #[arg(long, value_enum, default_value = "html", requires_if("svg", "plot"))]
    pub format: ReportFormat,
    /// One plot as SVG (implies --format svg).
    #[arg(long, value_enum)]
    pub plot: Option<PlotArg>,
    /// Override a scenario key (TOML value syntax), e.g. parallel.pp=16. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Profile that prices the step (default: the machine's bundled one); `defaults`: A100 fit.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Samples of [variability] (every rank simulated) and draws of --profile's fits.
    #[arg(long, value_name = "N", default_value_t = twin_sim::profile::DEFAULT_SAMPLES,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Text,
    Html,
    Svg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotArg {
    Memory,
    Timeline,
    Pareto,
    Goodput,
    Variability,
}

impl From<PlotArg> for rep::Plot {
    fn from(p: PlotArg) -> Self {
        match p {
            PlotArg::Memory => rep::Plot::Memory,
            PlotArg::Timeline => rep::Plot::Timeline,
            PlotArg::Pareto => rep::Plot::Pareto,
            PlotArg::Goodput => rep::Plot::Goodput,
            PlotArg::Variability => rep::Plot::Variability,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let plot = args.plot;
    let as_text = args.format == ReportFormat::Text;
    if as_text && plot.is_some() {
        eprintln!("error: --plot draws one SVG plot; --format text prints the figures without it");
        return Ok(ExitCode::from(2));
    }
    let out = args.out.clone().unwrap_or_else(|| match plot {
        Some(p) => PathBuf::from(format!("{}.svg", rep::Plot::from(p).name())),
        // Text is for reading: to stdout unless -o says otherwise.
        None if as_text => PathBuf::from("-"),
        None => PathBuf::from("report.html"),
    });
    let to_stdout = out.as_os_str() == "-";
    if !to_stdout {
        super::output::check_file(Some(&out), "--out")?;
    }
    let source = twin_sim::setup::ScenarioSource::read(&args.scenario)?;
    let parsed = source.parse()?;
    let (scenario, plan, sections) = parsed.resolve_with_sections(&args.overrides)?;
    let faults = sections.faults;
    super::warn_hf_unmodelled(&source.origin, &parsed.hf_unmodelled(&args.overrides)?);
    let pricing = super::pricing::from_arg(args.profile.as_deref())?;
    let text = if plot == Some(PlotArg::Pareto) {
        let req = SweepRequest {
            overrides: &args.overrides,
            vary: &[],
            search: true,
            shard: None,
            keep: Some(10),
            space: None,
        };
        let sweep_plan = SweepPlan::new(source, &req)?;
        let total = sweep_plan.layouts.len();
        let bar = super::progress::Bar::new("layouts", total, false);
        let result = sweep_plan.run(Objective::TokensPerS, &pricing, &|n| bar.inc_by(n));
        bar.finish();
        let hbm = Some(scenario.cluster.gpu.usable_bytes());
        sweep_report(&result, hbm).plot_svg(rep::Plot::Pareto)?
    } else {
        if plot == Some(PlotArg::Goodput) && faults.is_none() {
            eprintln!(
                "error: {}: --plot goodput needs a [faults] table in the scenario \
                 (docs/reference/faults.md), e.g. scenarios/512xA100-faults.toml",
                source.origin
            );
            return Ok(ExitCode::from(2));
        }
        if plot == Some(PlotArg::Variability) && sections.variability.is_none() {
            eprintln!(
                "error: {}: --plot variability needs a [variability] table in the scenario \
                 (docs/reference/scenarios.md#variability), e.g. scenarios/variability.toml",
                source.origin
            );
            return Ok(ExitCode::from(2));
        }
        let with_horizon = matches!(plot, None | Some(PlotArg::Goodput));
        let variability = match plot {
            None | Some(PlotArg::Variability) => sections.variability.as_ref(),
            _ => None,
        };
        let profile = super::pricing::profile_for(&pricing, &scenario)?;
        let horizon = if with_horizon {
            simulation::horizon_config(faults, None, None)
        } else {
            None
        };
        let sim = simulate_for_report(
            &scenario,
            &plan,
            &source.origin,
            profile.as_deref(),
            horizon.as_ref(),
            variability,
            args.samples,
        )?;
        let report = simulation_report(&sim, &scenario, &plan);
        match plot {
            Some(p) => report.plot_svg(p.into())?,
            None if as_text => sim.to_text(true),
            None => rep::to_html(&report)?,
        }
    };
    if to_stdout {
        std::io::stdout().write_all(text.as_bytes())?;
    } else {
        write_atomic(&out, &text)?;
        eprintln!(
            "wrote {} ({} KiB)",
            out.display(),
            text.len().div_ceil(1024)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Predicts `scenario` with the trace the timeline and memory sections read (representative
/// ranks), the horizon when `horizon` is given (drawing a progress bar over its trials), and
/// the samples of `variability` when given.
fn simulate_for_report(
    scenario: &Scenario,
    plan: &Plan,
    origin: &str,
    profile: Option<&twin_sim::profile::Profile>,
    horizon: Option<&twin_sim::scenario::FaultConfig>,
    variability: Option<&twin_sim::scenario::VariabilityConfig>,
    samples: u32,
) -> anyhow::Result<Simulation> {
    let opts = twin_sim::PredictOptions {
        trace: true,
        reproducible: true,
        collapse: true,
        ..Default::default()
    };
    let seeds = horizon.map_or(0, |h| h.seeds as usize);
    let bar = super::progress::Bar::new("seeds", seeds, seeds == 0);
    let progress = |_done: usize| bar.inc();
    let sim_opts = simulation::SimulateOptions {
        predict: &opts,
        profile,
        samples,
        variability,
        sample_progress: None,
        horizon,
        progress: bar
            .enabled()
            .then_some(&progress as &(dyn Fn(usize) + Sync)),
    };
    let out = simulation::simulate(scenario, plan, origin, &sim_opts);
    bar.finish();
    Ok(out?)
}

/// Writes `report` as HTML to `path` (`--report FILE` of simulate, sweep and verify).
pub fn write_html(path: &Path, report: &rep::Report) -> anyhow::Result<()> {
    let html = rep::to_html(report)?;
    write_atomic(path, &html).with_context(|| format!("writing --report {}", path.display()))?;
    Ok(())
}

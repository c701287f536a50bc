//! `twin simulate`: predict one training step of a scenario and print the report.

use super::{write_atomic, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use twin_sim::simulation;

/// Predict step time, throughput, MFU, memory and bubbles for a scenario.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin simulate scenarios/512xA100.toml
  twin simulate scenarios/512xA100.toml --format json
  twin simulate scenarios/512xA100.toml --set parallel.pp=16 --set parallel.dp=4
  twin simulate scenarios/512xA100.toml --profile mine.toml   (from twin calibrate)
  twin simulate scenarios/512xA100.toml --full        (every rank; same report)
  twin simulate scenarios/small.toml --trace small.trace.json.gz   (open in ui.perfetto.dev)
  twin simulate scenarios/512xA100-faults.toml --horizon 30d --report r.html

Details: docs/reference/cli.md#twin-simulate"
)]
pub struct Args {
    /// Scenario TOML file (docs/reference/scenarios.md).
    pub scenario: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Override a scenario key (TOML value syntax), e.g. parallel.pp=16. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Write a Chrome/Perfetto trace for ui.perfetto.dev (gzip: FILE.gz).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Ranks to trace: 0-63,128 or all (default: one per pipeline stage).
    #[arg(
        long,
        value_name = "LIST",
        requires = "trace",
        conflicts_with = "collapse"
    )]
    pub trace_ranks: Option<twin_sim::trace::TraceRanks>,
    /// Print the per-stage memory breakdown and the op of each peak.
    #[arg(long)]
    pub memory: bool,
    /// Print where each stage's step goes (GEMMs, attention, comm, idle...).
    #[arg(long)]
    pub breakdown: bool,
    /// Profile that prices the step (default: the machine's bundled one); `defaults`: A100 fit.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Simulate representative ranks only (exact; docs/reference/topology.md).
    #[arg(long, conflicts_with = "full")]
    pub collapse: bool,
    /// Simulate every rank (same report; more events and time).
    #[arg(long)]
    pub full: bool,
    /// Simulate failures and restarts over this horizon, e.g. 30d (docs/reference/faults.md).
    #[arg(long, value_name = "DURATION", value_parser = parse_horizon)]
    pub horizon: Option<u64>,
    /// Monte Carlo trials of the horizon (overrides [faults] seeds).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub seeds: Option<u32>,
    /// Samples: of [variability] (P50/P95/P99, every rank) and of --profile's fitted
    /// parameters (the step time's 95% interval).
    #[arg(long, value_name = "N", default_value_t = twin_sim::profile::DEFAULT_SAMPLES,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
    /// Zero the wall-clock fields, for byte-identical output.
    #[arg(long)]
    pub reproducible: bool,
    /// Also write the resolved scenario (presets, defaults, --set) to FILE.
    #[arg(long, value_name = "FILE")]
    pub resolved: Option<PathBuf>,
    /// Also write an HTML report to FILE (twin report -h).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// Says on stderr which ranks a default trace holds and how to get others.
fn note_representatives(reps: &[u32], world: u32) {
    if reps.len() as u32 >= world {
        return;
    }
    let shown: Vec<String> = reps.iter().map(u32::to_string).collect();
    let shown = match shown.as_slice() {
        [first, second, .., last] if shown.len() > 6 => format!("{first}, {second}, ..., {last}"),
        _ => shown.join(", "),
    };
    eprintln!(
        "note: the trace holds one rank per pipeline stage ({} of {world}: {shown}); \
         --trace-ranks all (or --full) traces every rank, --trace-ranks 0-63 a range",
        reps.len()
    );
}

fn parse_horizon(text: &str) -> Result<u64, String> {
    twin_sim::scenario::parse_duration_ns(text)
        .ok_or_else(|| format!("`{text}` is not a duration such as 30d, 12h, 90m or 3600s"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::output::check_file(args.trace.as_deref(), "--trace")?;
    super::output::check_file(args.resolved.as_deref(), "--resolved")?;
    super::output::check_file(args.report.as_deref(), "--report")?;
    let source = twin_sim::setup::ScenarioSource::read(&args.scenario)?;
    let parsed = source.parse()?;
    let (scenario, plan, sections) = parsed.resolve_with_sections(&args.overrides)?;
    let faults = sections.faults;
    if let Some(path) = &args.resolved {
        write_atomic(path, &twin_sim::scenario::to_toml(&scenario))?;
    }
    super::warn_hf_unmodelled(&source.origin, &parsed.hf_unmodelled(&args.overrides)?);
    let mut trace_ranks = match (&args.trace, &args.trace_ranks) {
        (None, _) => None,
        (Some(_), Some(list)) => list.resolve(plan.world)?,
        (Some(_), None) if args.full => None,
        (Some(_), None) => {
            let reps = twin_sim::trace::representative_ranks(&plan);
            note_representatives(&reps, plan.world);
            Some(reps)
        }
    };
    // The breakdown reads the representative ranks' traces.
    if args.breakdown {
        let reps = twin_sim::trace::representative_ranks(&plan);
        match (&args.trace, &mut trace_ranks) {
            (None, _) => trace_ranks = Some(reps),
            (Some(_), Some(list)) => {
                list.extend(reps);
                list.sort_unstable();
                list.dedup();
            }
            (Some(_), None) => {}
        }
    }
    // Collapsed by default, as it is exact wherever the engine uses it (the representatives
    // are the ranks it runs); a trace of other ranks needs every rank simulated.
    let reps_suffice = match (&args.trace, &trace_ranks) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(_), Some(list)) => {
            let reps = twin_sim::trace::representative_ranks(&plan);
            list.iter().all(|r| reps.binary_search(r).is_ok())
        }
    };
    let opts = twin_sim::PredictOptions {
        // The report's timeline and memory are drawn from the trace.
        trace: args.trace.is_some() || args.report.is_some() || args.breakdown,
        trace_ranks,
        reproducible: args.reproducible,
        collapse: args.collapse || (!args.full && reps_suffice),
        ..Default::default()
    };
    let pricing = super::pricing::from_arg(args.profile.as_deref())?;
    let profile = super::pricing::profile_for(&pricing, &scenario)?;
    let horizon = simulation::horizon_config(faults, args.horizon, args.seeds);
    let seeds = horizon.as_ref().map_or(0, |h| h.seeds as usize);
    // Bars for a horizon's trials and for [variability]'s samples, only when they run.
    let bar = super::progress::Bar::new("seeds", seeds, seeds == 0);
    let progress = |_done: usize| bar.inc();
    let samples = sections
        .variability
        .as_ref()
        .map_or(0, |_| args.samples as usize);
    let sample_bar = super::progress::Bar::new("samples", samples, samples == 0);
    let sample_progress = |_done: usize| sample_bar.inc();
    let sim_opts = simulation::SimulateOptions {
        predict: &opts,
        profile: profile.as_deref(),
        samples: args.samples,
        variability: sections.variability.as_ref(),
        sample_progress: sample_bar
            .enabled()
            .then_some(&sample_progress as &(dyn Fn(usize) + Sync)),
        horizon: horizon.as_ref(),
        progress: bar
            .enabled()
            .then_some(&progress as &(dyn Fn(usize) + Sync)),
    };
    let out = simulation::simulate(&scenario, &plan, &source.origin, &sim_opts);
    sample_bar.finish();
    bar.finish();
    let mut out = out?;
    if args.breakdown {
        out.time_by_class = Some(
            out.stage_classes()
                .context("the trace lacks a stage's representative rank")?,
        );
    }
    if let Some(path) = &args.trace {
        let p = &out.prediction;
        let trace = p.result.trace.as_ref().context("no trace was recorded")?;
        trace
            .write_chrome_file(path, &p.staged.plan, &p.staged.schedule)
            .with_context(|| format!("cannot write the trace {}", path.display()))?;
    }
    if let Some(path) = &args.report {
        let report = super::report::simulation_report(&out, &scenario, &plan);
        super::report::write_html(path, &report)?;
    }
    match args.format {
        Format::Json => println!("{}", out.to_json()?),
        Format::Text => print!("{}", out.to_text(args.memory)),
    }
    Ok(ExitCode::SUCCESS)
}

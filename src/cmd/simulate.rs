//! `twin simulate`: predict one training step of a scenario and print the report.

use super::{load_scenario, write_atomic, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Predict step time, throughput, MFU, memory and bubbles for a scenario.
///
/// The scenario is planned, turned into a per-rank schedule, validated, and executed by the
/// discrete-event simulator over every rank. The report explains itself; see README.md
/// ("Reading the report") for each line.
///
/// Examples:
///   twin simulate scenarios/512xA100.toml
///   twin simulate scenarios/512xA100.toml --format json
///   twin simulate scenarios/512xA100.toml --set parallel.pp=16 --set parallel.dp=4
///   twin simulate scenarios/512xA100.toml --profile scenarios/profiles/a100-dgx.toml
///   twin simulate scenarios/small.toml --trace small.trace.json   (open in ui.perfetto.dev)
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Scenario TOML file (see docs/scenarios.md).
    pub scenario: PathBuf,
    /// Output format: readable text, or one JSON object for scripts and CI.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Override a scenario key (TOML value syntax), e.g. --set parallel.pp=16. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Write a Chrome/Perfetto trace (one process per rank, one thread per stream, a memory
    /// counter track). Open it in ui.perfetto.dev.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print the per-stage memory breakdown and the op at which each peak occurs.
    #[arg(long)]
    pub memory: bool,
    /// Hardware profile TOML (docs/profiles.md; bundled: scenarios/profiles/*.toml) whose
    /// cost-model parameters replace the defaults. It must describe the scenario's GPU.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Simulate one representative rank per pipeline stage (tp = cp = ep = dp = 0) instead of
    /// every rank: exact when ranks are symmetric (no stragglers), and much faster. Falls back
    /// to every rank otherwise. The trace then holds only the representatives.
    #[arg(long)]
    pub collapse: bool,
    /// Zero the wall-clock fields (sim_wall_s) so that two runs give byte-identical output.
    #[arg(long)]
    pub reproducible: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let scenario = load_scenario(&args.scenario, &args.overrides)?;
    let opts = twin_sim::PredictOptions {
        trace: args.trace.is_some(),
        reproducible: args.reproducible,
        collapse: args.collapse,
        ..Default::default()
    };
    let profile = match &args.profile {
        Some(p) => Some(twin_sim::profile::load(p)?),
        None => None,
    };
    let prediction = twin_sim::predict_with(&scenario, &opts, profile.as_ref())
        .with_context(|| format!("simulating {}", args.scenario.display()))?;
    if let Some(path) = &args.trace {
        let json = prediction.trace_json().context("no trace was recorded")?;
        write_atomic(path, &json)?;
    }
    let report = &prediction.report;
    match args.format {
        Format::Json => println!("{}", report.to_json()),
        Format::Text => {
            print!("{}", report.to_text());
            if args.memory {
                print!("{}", report.memory_text());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

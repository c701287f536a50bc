//! `twin simulate`: predict one training step of a scenario and print the report.

use super::{write_atomic, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Predict step time, throughput, MFU, memory and bubbles for a scenario.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin simulate scenarios/512xA100.toml
  twin simulate scenarios/512xA100.toml --format json
  twin simulate scenarios/512xA100.toml --set parallel.pp=16 --set parallel.dp=4
  twin simulate scenarios/512xA100.toml --profile scenarios/profiles/a100-dgx.toml
  twin simulate scenarios/512xA100.toml --full        (every rank; same report)
  twin simulate scenarios/small.toml --trace small.trace.json   (open in ui.perfetto.dev)
  twin simulate scenarios/512xA100-faults.toml --horizon 30d --seeds 1000   (docs/reference/faults.md)

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
    /// Write a Chrome/Perfetto trace (open it in ui.perfetto.dev).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print the per-stage memory breakdown and the op of each peak.
    #[arg(long)]
    pub memory: bool,
    /// Hardware profile TOML whose parameters replace the defaults (docs/reference/profiles.md).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Simulate representative ranks only, also with --trace (exact; docs/reference/topology.md).
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
    /// With --profile: draws of the profile's fitted parameters (those with ci95) used for
    /// the step time's 95% interval (seeded by the scenario's run.seed; docs/reference/profiles.md).
    #[arg(long, value_name = "N", default_value_t = twin_sim::profile::DEFAULT_SAMPLES,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    /// With --profile: draws of the fitted parameters for the step time's 95% interval.
    pub samples: u32,
    /// Zero the wall-clock fields, for byte-identical output.
    #[arg(long)]
    pub reproducible: bool,
}

fn parse_horizon(text: &str) -> Result<u64, String> {
    twin_sim::scenario::parse_duration_ns(text)
        .ok_or_else(|| format!("`{text}` is not a duration such as 30d, 12h, 90m or 3600s"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::output::check_file(args.trace.as_deref(), "--trace")?;
    let source = twin_sim::setup::ScenarioSource::read(&args.scenario)?;
    let parsed = source.parse()?;
    let (scenario, plan, faults) = parsed.resolve_with_faults(&args.overrides)?;
    super::warn_hf_unmodelled(&source.origin, &parsed.hf_unmodelled(&args.overrides)?);
    let opts = twin_sim::PredictOptions {
        trace: args.trace.is_some(),
        reproducible: args.reproducible,
        // Collapsed by default, as it is exact wherever the engine uses it; a trace shows
        // every rank unless --collapse asks for the representatives only.
        collapse: args.collapse || (!args.full && args.trace.is_none()),
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
    let ci95_ns = match &profile {
        Some(p) => twin_sim::uncertainty::step_time_ci95(
            &prediction.staged,
            p,
            args.samples,
            scenario.run.seed,
            &twin_sim::sim_options(&scenario, &opts),
        )
        .context("propagating the profile's uncertainty")?,
        None => None,
    };
    let ci95_s = ci95_ns.map(|[lo, hi]| [lo as f64 * 1e-9, hi as f64 * 1e-9]);
    let horizon = horizon_config(faults, &args)
        .map(|config| {
            let job = twin_sim::faults::JobFacts::from_scenario(
                &scenario,
                &plan,
                (report.step_time_s * 1e9).round() as u64,
                report.exposed_comm_fraction,
            );
            let bar = Progress::new(config.seeds);
            let progress = |done: usize| bar.show(done);
            let out = twin_sim::faults::simulate_horizon(
                &config,
                &job,
                bar.enabled.then_some(&progress as &(dyn Fn(usize) + Sync)),
            );
            bar.finish();
            out
        })
        .transpose()
        .context("simulating the horizon")?;
    match args.format {
        Format::Json => match (&horizon, ci95_s) {
            (None, None) => println!("{}", report.to_json()),
            (h, ci) => {
                let mut v: serde_json::Value = serde_json::from_str(&report.to_json())?;
                if let Some(obj) = v.as_object_mut() {
                    if let Some(ci) = ci {
                        obj.insert("step_time_ci95_s".into(), serde_json::to_value(ci)?);
                    }
                    if let Some(h) = h {
                        obj.insert("goodput".into(), h.goodput.mean.into());
                        obj.insert("ettr".into(), h.ettr.mean.into());
                        obj.insert("faults".into(), h.to_json_value());
                    }
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            }
        },
        Format::Text => {
            for line in report.to_text().lines() {
                match ci95_s {
                    Some([lo, hi]) if line.starts_with("step time") => println!(
                        "step time       {:.3} ms (95% CI {:.3}\u{2013}{:.3} ms)",
                        report.step_time_s * 1e3,
                        lo * 1e3,
                        hi * 1e3
                    ),
                    _ if line.starts_with("simulated") && prediction.result.collapsed => {
                        println!("{line} (representative ranks; --full simulates every rank)")
                    }
                    _ => println!("{line}"),
                }
            }
            if args.memory {
                print!("{}", report.memory_text());
            }
            if let Some(h) = &horizon {
                print!("{}", h.to_text());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The fault model to run: the scenario's `[faults]`, or the defaults when only `--horizon`
/// asks for one; flags override its horizon and seeds.
fn horizon_config(
    faults: Option<twin_sim::scenario::FaultConfig>,
    args: &Args,
) -> Option<twin_sim::scenario::FaultConfig> {
    let mut c = match (faults, args.horizon) {
        (None, None) => return None,
        (f, _) => f.unwrap_or_default(),
    };
    if let Some(h) = args.horizon {
        c.horizon_ns = h;
    }
    if let Some(n) = args.seeds {
        c.seeds = n;
    }
    Some(c)
}

/// A one-line progress bar on stderr, only when stderr is a terminal.
struct Progress {
    total: u32,
    enabled: bool,
}

impl Progress {
    fn new(total: u32) -> Progress {
        use std::io::IsTerminal;
        Progress {
            total,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn show(&self, done: usize) {
        let total = self.total.max(1) as usize;
        if done.is_multiple_of((total / 50).max(1)) || done == total {
            let filled = done * 30 / total;
            eprint!(
                "\r  seeds [{}{}] {done}/{total}",
                "#".repeat(filled),
                " ".repeat(30 - filled.min(30))
            );
        }
    }

    fn finish(&self) {
        if self.enabled {
            eprintln!();
        }
    }
}

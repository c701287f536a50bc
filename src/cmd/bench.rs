//! `twin bench`: how fast the simulator is. Reports wall time per simulated step (every rank
//! simulated) and events per second, the figures docs/performance.md tracks.

use super::{load_scenario, Format};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use twin_sim::profile::bundled::Pricing;
use twin_sim::stats::median_or_zero as median;

/// Measure simulator speed on scenarios (default: the 512- and 16,384-GPU bundled ones).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin bench
  twin bench scenarios/512xA100.toml --repeat 5
  twin bench --search scenarios/16384xH100.toml
  twin bench --samples 16 scenarios/variability.toml

Details: docs/reference/cli.md#twin-bench"
)]
pub struct Args {
    /// Scenario files to measure.
    #[arg(default_values = ["scenarios/512xA100.toml", "scenarios/16384xH100.toml"])]
    pub scenarios: Vec<PathBuf>,
    /// Repetitions per scenario (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Measure the collapsed mode (`twin simulate --collapse`): representative ranks only,
    /// where that is exact.
    #[arg(long)]
    pub collapse: bool,
    /// Measure `twin sweep --search --top 10` instead: layouts per second over the whole
    /// space, pruned layouts counted.
    #[arg(long, conflicts_with = "collapse")]
    pub search: bool,
    /// Measure `twin simulate --samples N` instead: N samples of the scenario's
    /// `[variability]`, every rank simulated, in parallel.
    #[arg(long, value_name = "N", conflicts_with_all = ["collapse", "search"],
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: Option<u32>,
    /// Profile that prices the runs (default: each scenario's machine's bundled one, as
    /// `twin simulate` prices it); `defaults`: A100 fit.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

#[derive(serde::Serialize)]
struct SamplesRow {
    scenario: String,
    /// The profile that priced the runs (`defaults`: twin's defaults).
    priced_with: String,
    gpus: u32,
    samples: u32,
    /// Ops of one sample's step (every rank), each one event of the engine.
    ops_per_sample: u64,
    median_s: f64,
    /// The median run's wall time over its samples.
    wall_per_sample_s: f64,
    /// The process's CPU time (every thread, user and system) over every run's samples.
    cpu_per_sample_s: f64,
    events_per_s: f64,
}

/// CPU time (user and system, every thread) this process has used so far, in seconds; 0 where
/// the system does not say.
fn cpu_s() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a `rusage` into the pointer it is given, which points to
    // one; the value is read only when the call reports success.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } == 0;
    if !ok {
        return 0.0;
    }
    // SAFETY: initialised by the successful call above (and zeroed before it).
    let u = unsafe { usage.assume_init() };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn samples(args: &Args, pricing: &Pricing, n: u32) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let mut rows = Vec::new();
    for path in &args.scenarios {
        let source = twin_sim::setup::ScenarioSource::read(path)?;
        let (scenario, _, sections) = source.parse()?.resolve_with_sections(&[])?;
        let config = sections.variability.with_context(|| {
            format!(
                "{}: no [variability] table; `twin bench --samples` measures its samples \
                 (keys: docs/reference/scenarios.md#variability)",
                path.display()
            )
        })?;
        let base = twin_sim::sim_options(&scenario, &twin_sim::PredictOptions::default());
        let profile = super::pricing::profile_for(pricing, &scenario)?;
        let staged = twin_sim::Staged::with_profile(&scenario, profile.as_deref())?;
        let mut times = Vec::new();
        let cpu0 = cpu_s();
        for _ in 0..args.repeat {
            let t0 = Instant::now();
            twin_sim::variability::sample_steps(
                &staged,
                &config,
                n,
                scenario.run.seed,
                &base,
                0,
                None,
            )?;
            times.push(t0.elapsed().as_secs_f64());
        }
        let cpu = cpu_s() - cpu0;
        let t = median(&times);
        let ops = staged.schedule.total_ops();
        rows.push(SamplesRow {
            scenario: path.display().to_string(),
            priced_with: priced_with(profile.as_deref()),
            gpus: scenario.cluster.gpus,
            samples: n,
            ops_per_sample: ops,
            median_s: t,
            wall_per_sample_s: t / f64::from(n),
            cpu_per_sample_s: cpu / (f64::from(n) * f64::from(args.repeat)),
            events_per_s: ops as f64 * f64::from(n) / t.max(1e-12),
        });
    }
    match args.format {
        Format::Json => println!(
            "{}",
            twin_sim::json::document("bench-samples", &serde_json::json!({ "rows": rows }))?
        ),
        Format::Text => {
            println!(
                "{:<34} {:>7} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
                "scenario", "gpus", "samples", "ops", "s", "ms/sample", "cpu ms", "Mevents/s"
            );
            for r in &rows {
                println!(
                    "{:<34} {:>7} {:>7} {:>10} {:>9.2} {:>9.1} {:>9.1} {:>9.1}",
                    r.scenario,
                    r.gpus,
                    r.samples,
                    r.ops_per_sample,
                    r.median_s,
                    r.wall_per_sample_s * 1e3,
                    r.cpu_per_sample_s * 1e3,
                    r.events_per_s / 1e6
                );
            }
            for r in &rows {
                println!("{}: priced with {}", r.scenario, r.priced_with);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct SearchRow {
    scenario: String,
    gpus: u32,
    layouts: usize,
    simulated: usize,
    pruned: usize,
    median_s: f64,
    layouts_per_s: f64,
}

fn search(args: &Args, pricing: &Pricing) -> anyhow::Result<ExitCode> {
    use twin_sim::sweep::{Objective, SweepPlan, SweepRequest};
    let mut rows = Vec::new();
    for path in &args.scenarios {
        let source = twin_sim::setup::ScenarioSource::read(path)?;
        let gpus = source.resolve(&[])?.cluster.gpus;
        let req = SweepRequest {
            search: true,
            keep: Some(10),
            ..SweepRequest::default()
        };
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..args.repeat {
            let t0 = Instant::now();
            let plan = SweepPlan::new(source.clone(), &req)?;
            // Priced as `twin sweep` prices it.
            let r = plan.run(Objective::TokensPerS, pricing, &|_| {});
            times.push(t0.elapsed().as_secs_f64());
            last = Some(r);
        }
        let Some(r) = last else { continue };
        let t = median(&times);
        rows.push(SearchRow {
            scenario: path.display().to_string(),
            gpus,
            layouts: r.layouts,
            simulated: r.simulated() + r.failed,
            pruned: r.pruned,
            median_s: t,
            layouts_per_s: r.layouts as f64 / t.max(1e-12),
        });
    }
    match args.format {
        Format::Json => println!(
            "{}",
            twin_sim::json::document("bench-search", &serde_json::json!({ "rows": rows }))?
        ),
        Format::Text => {
            println!(
                "{:<34} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}",
                "scenario", "gpus", "layouts", "simulated", "pruned", "s", "layouts/s"
            );
            for r in &rows {
                println!(
                    "{:<34} {:>7} {:>9} {:>9} {:>9} {:>9.2} {:>10.0}",
                    r.scenario,
                    r.gpus,
                    r.layouts,
                    r.simulated,
                    r.pruned,
                    r.median_s,
                    r.layouts_per_s
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct Row {
    scenario: String,
    /// The profile that priced the runs (`defaults`: twin's defaults).
    priced_with: String,
    gpus: u32,
    layout: twin_sim::json::Layout,
    ops: u64,
    events: u64,
    /// Whether the runs simulated representatives only (`--collapse`, where exact).
    collapsed: bool,
    generate_median_s: f64,
    simulate_median_s: f64,
    simulate_best_s: f64,
    total_median_s: f64,
    events_per_s: f64,
}

/// The profile's path as the rows name it: its file, or `defaults`.
fn priced_with(profile: Option<&twin_sim::profile::Profile>) -> String {
    profile.map_or_else(
        || super::pricing::DEFAULTS.to_string(),
        |p| p.bundled.map_or_else(|| p.name.clone(), str::to_string),
    )
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let pricing = super::pricing::from_arg(args.profile.as_deref())?;
    if args.search {
        return search(&args, &pricing);
    }
    if let Some(n) = args.samples {
        return samples(&args, &pricing, n);
    }
    let mut rows = Vec::new();
    for path in &args.scenarios {
        let scenario = load_scenario(path, &[])?;
        let profile = super::pricing::profile_for(&pricing, &scenario)?;
        let (mut gen_s, mut sim_s, mut total_s): (Vec<f64>, Vec<f64>, Vec<f64>) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut ops, mut events, mut collapsed) = (0, 0, false);
        let options = twin_sim::engine::SimOptions {
            collapse: args.collapse,
            ..twin_sim::engine::SimOptions::default()
        };
        for _ in 0..args.repeat {
            let t0 = Instant::now();
            let staged = twin_sim::Staged::with_profile(&scenario, profile.as_deref())?;
            let t1 = Instant::now();
            let result = staged.simulate(&options)?;
            let t2 = Instant::now();
            ops = staged.schedule.total_ops();
            events = result.events;
            collapsed = result.collapsed;
            gen_s.push((t1 - t0).as_secs_f64());
            sim_s.push((t2 - t1).as_secs_f64());
            total_s.push((t2 - t0).as_secs_f64());
        }
        let sim_median = median(&sim_s);
        rows.push(Row {
            scenario: path.display().to_string(),
            priced_with: priced_with(profile.as_deref()),
            gpus: scenario.cluster.gpus,
            layout: twin_sim::json::Layout::of(&scenario),
            ops,
            events,
            collapsed,
            generate_median_s: median(&gen_s),
            simulate_median_s: sim_median,
            simulate_best_s: sim_s.iter().copied().fold(f64::INFINITY, f64::min),
            total_median_s: median(&total_s),
            events_per_s: events as f64 / sim_median.max(1e-12),
        });
    }
    match args.format {
        Format::Json => println!(
            "{}",
            twin_sim::json::document("bench", &serde_json::json!({ "rows": rows }))?
        ),
        Format::Text => {
            println!(
                "{:<34} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
                "scenario", "gpus", "ops", "events", "gen ms", "sim ms", "total ms", "Mevents/s"
            );
            for r in &rows {
                println!(
                    "{:<34} {:>7} {:>10} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>9.1}{}",
                    r.scenario,
                    r.gpus,
                    r.ops,
                    r.events,
                    r.generate_median_s * 1e3,
                    r.simulate_median_s * 1e3,
                    r.total_median_s * 1e3,
                    r.events_per_s / 1e6,
                    if r.collapsed { "  collapsed" } else { "" }
                );
            }
            for r in &rows {
                println!("{}: priced with {}", r.scenario, r.priced_with);
            }
            if cfg!(debug_assertions) {
                println!("note: this is a debug build; use `cargo run --release -- bench` for real figures");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

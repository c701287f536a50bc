//! `twin bench`: how fast the simulator is. Reports wall time per simulated step (every rank
//! simulated) and events per second, the figures docs/performance.md tracks.

use super::{load_scenario, Format};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use twin_sim::stats::median_or_zero as median;

/// Measure simulator speed on scenarios (default: the 512- and 16,384-GPU bundled ones).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin bench
  twin bench scenarios/512xA100.toml --repeat 5
  twin bench --search scenarios/16384xH100.toml

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

fn search(args: &Args) -> anyhow::Result<ExitCode> {
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
            let r = plan.run(Objective::TokensPerS, &|_| {});
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.search {
        return search(&args);
    }
    let mut rows = Vec::new();
    for path in &args.scenarios {
        let scenario = load_scenario(path, &[])?;
        let (mut gen_s, mut sim_s, mut total_s): (Vec<f64>, Vec<f64>, Vec<f64>) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut ops, mut events, mut collapsed) = (0, 0, false);
        let options = twin_sim::engine::SimOptions {
            collapse: args.collapse,
            ..twin_sim::engine::SimOptions::default()
        };
        for _ in 0..args.repeat {
            let t0 = Instant::now();
            let staged = twin_sim::Staged::new(&scenario)?;
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
            if cfg!(debug_assertions) {
                println!("note: this is a debug build; use `cargo run --release -- bench` for real figures");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

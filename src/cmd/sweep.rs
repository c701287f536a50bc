//! `twin sweep`: simulate many layouts of one scenario in parallel and rank them; also joins
//! the shards of a sweep spread over a batch system (`--merge`).

use super::write_atomic_with;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use twin_sim::setup::ScenarioSource;
use twin_sim::sweep::{self, Objective, SweepPlan, SweepRequest};

/// Simulate many layouts of a scenario and rank them.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin sweep scenarios/512xA100.toml --vary parallel.tp=1,2,4,8 --vary parallel.pp=1..16
  twin sweep scenarios/512xA100.toml --search --top 10 --out layouts.csv
  twin sweep scenarios/512xA100.toml --search --objective mfu --shard 0/4 --out part-0.json
  twin sweep --merge part-0.json part-1.json part-2.json part-3.json --out all.csv

Details: docs/reference/cli.md#twin-sweep"
)]
pub struct Args {
    /// The base scenario (not needed with --merge).
    #[arg(required_unless_present = "merge")]
    pub scenario: Option<PathBuf>,
    /// An axis: KEY=V1,V2,... or KEY=A..B. Repeatable.
    #[arg(long, value_name = "KEY=VALUES")]
    pub vary: Vec<String>,
    /// Search every layout of the GPU count (crossed with any --vary axes); simulates only
    /// layouts whose lower bound can still reach the --top best.
    #[arg(long)]
    pub search: bool,
    /// With --search: simulate every layout instead of pruning by the bound.
    #[arg(long, requires = "search")]
    pub exhaustive: bool,
    /// With --search: every axis (full), or tp, pp, dp, vpp, micro batch, recompute and ZeRO
    /// only, the rest as the scenario has it (layouts).
    #[arg(long, value_enum, default_value = "full", requires = "search")]
    pub space: Space,
    /// Override a key of the base scenario first. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Hardware profile TOML that prices every layout; `defaults` for twin's A100-fitted
    /// defaults. Without it, each layout's machine's bundled profile, if any.
    #[arg(long, value_name = "FILE", conflicts_with = "merge")]
    pub profile: Option<PathBuf>,
    /// What to rank by.
    #[arg(long, value_enum, default_value = "tokens-per-s")]
    pub objective: Obj,
    /// How many of the best layouts to print.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Write every simulated layout to FILE: .csv for CSV, anything else JSON.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Run only shard I of N (0-based): layouts whose index is I modulo N.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Join sweep results (JSON files written by --out) instead of sweeping.
    #[arg(long, num_args = 1.., value_name = "FILES", conflicts_with_all = ["scenario", "vary", "search", "shard"])]
    pub merge: Vec<PathBuf>,
    /// text: the top-N table; json or csv: every simulated layout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: SweepFormat,
    /// The same as --format json (kept for one release).
    #[arg(long, hide = true)]
    pub json: bool,
    /// Also write an HTML report to FILE (Pareto plot, best layouts).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Space {
    Full,
    Layouts,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepFormat {
    Text,
    Json,
    Csv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Obj {
    TokensPerS,
    Mfu,
    StepTime,
    Memory,
}

impl From<Obj> for Objective {
    fn from(o: Obj) -> Self {
        match o {
            Obj::TokensPerS => Objective::TokensPerS,
            Obj::Mfu => Objective::Mfu,
            Obj::StepTime => Objective::StepTime,
            Obj::Memory => Objective::Memory,
        }
    }
}

fn bad_input(err: impl Into<anyhow::Error>) -> ExitCode {
    let err = err.into();
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    ExitCode::from(2)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::output::check_file(args.out.as_deref(), "--out")?;
    super::output::check_file(args.report.as_deref(), "--report")?;
    let pricing = match super::pricing::from_arg(args.profile.as_deref()) {
        Ok(p) => p,
        Err(e) => return Ok(bad_input(e)),
    };
    let t0 = Instant::now();
    // The usable HBM per GPU the report draws (unknown when merging shards).
    let mut hbm_bytes = None;
    // The base scenario with its own layer split (and its name), when a search left it out:
    // the text report prices it beside the search's best.
    let mut own_layout = None;
    let result = if !args.merge.is_empty() {
        match sweep::merge_files(&args.merge) {
            Ok(r) => r,
            Err(e) => return Ok(bad_input(e)),
        }
    } else {
        let req = SweepRequest {
            overrides: &args.overrides,
            vary: &args.vary,
            search: args.search,
            shard: args.shard.as_deref(),
            keep: (args.search && !args.exhaustive).then_some(args.top.max(1)),
            space: (args.space == Space::Layouts).then(sweep::SearchSpace::layouts_only),
        };
        let plan = args
            .scenario
            .as_ref()
            .context("a scenario file is needed")
            .and_then(|p| Ok(SweepPlan::new(ScenarioSource::read(p)?, &req)?));
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => return Ok(bad_input(e)),
        };
        let scenario = plan
            .source
            .parse()
            .ok()
            .and_then(|p| p.resolve(&args.overrides).ok());
        if args.report.is_some() {
            hbm_bytes = scenario.as_ref().map(|s| s.cluster.gpu.usable_bytes());
        }
        let total = plan.layouts.len();
        if args.search && total > 20_000 && !super::progress::quiet() {
            // A large space takes a while: say what runs and how to make it smaller.
            let how = if args.exhaustive {
                "every layout simulated (--exhaustive)"
            } else {
                "each bounded, only those that can reach --top simulated"
            };
            eprintln!(
                "note: {total} layouts to search, {how}; --space layouts searches tp, pp, dp, \
                 vpp, micro batch, recompute and ZeRO only, and --shard I/N splits the work"
            );
        }
        if !super::progress::quiet() {
            if let Some(note) = scenario.as_ref().and_then(|s| pricing_note(&pricing, s)) {
                eprintln!("note: {note}");
            }
        }
        let bar = super::progress::Bar::new("layouts", total, false);
        own_layout = plan
            .own_split
            .clone()
            .map(|source| (source, plan.scenario_name.clone()));
        let r = plan.run(args.objective.into(), &pricing, &|n| bar.inc_by(n));
        bar.finish();
        r
    };
    let wall_s = t0.elapsed().as_secs_f64();
    if let Some(path) = &args.out {
        if path.extension().is_some_and(|e| e == "csv") {
            write_atomic_with(path, &mut |w| {
                result.write_csv(w).map_err(std::io::Error::other)
            })?;
        } else {
            write_atomic_with(path, &mut |w| {
                result.write_json(w).map_err(std::io::Error::other)
            })?;
        }
    }
    if let Some(path) = &args.report {
        super::report::write_html(path, &super::report::sweep_report(&result, hbm_bytes))?;
    }
    let format = if args.json {
        SweepFormat::Json
    } else {
        args.format
    };
    if format == SweepFormat::Json {
        println!("{}", result.to_json()?);
    } else if format == SweepFormat::Csv {
        result.write_csv(std::io::stdout().lock())?;
    } else {
        print!("{}", result.top_text(args.top));
        if let Some((source, name)) = &own_layout {
            let layouts = vec![(0, args.overrides.clone())];
            let own = sweep::run(
                source,
                name,
                layouts,
                args.objective.into(),
                &pricing,
                &|| {},
            );
            print!("{}", own_layout_text(&own, &result));
        }
        if args.merge.is_empty() {
            let simulated = result.simulated() + result.failed;
            eprintln!(
                "{} layouts ({simulated} simulated, {} pruned by bound) in {wall_s:.2} s: {:.0} layouts/s",
                result.layouts,
                result.pruned,
                result.layouts as f64 / wall_s.max(1e-9)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The base scenario's own layout (its written layer split, which the search left out), priced
/// beside the search's best: a search never hides that the file's layout does better.
fn own_layout_text(own: &sweep::SweepResult, searched: &sweep::SweepResult) -> String {
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    let intro = "\nthe scenario's own layout, with its own layer split (a search splits layers as \
                 Megatron-Core does automatically, so this layout is not among the candidates):";
    let Some(row) = own.rows.first().filter(|r| r.simulated) else {
        let why = match own.rows.first() {
            Some(r) => format!(
                "over HBM by a lower bound ({:.2} GiB)",
                gib(r.peak_memory_bytes)
            ),
            None => "could not be simulated".to_string(),
        };
        return format!("{intro}\n  {why}\n");
    };
    let fits = if row.fits { "fits" } else { "does not fit" };
    let mut o = format!(
        "{intro}\n  step {:.3} ms, {:.0} tokens/s, MFU {:.1}%, {:.2} GiB ({fits})\n",
        row.step_time_s * 1e3,
        row.tokens_per_s,
        row.mfu * 100.0,
        gib(row.peak_memory_bytes),
    );
    let by_speed = matches!(
        searched.objective,
        Objective::TokensPerS | Objective::StepTime
    );
    if let Some(best) = searched.ranked().first().filter(|_| by_speed) {
        if row.fits && row.tokens_per_s > best.tokens_per_s {
            o.push_str(&format!(
                "  {:.1}% more tokens/s than the search's best\n",
                (row.tokens_per_s / best.tokens_per_s - 1.0) * 100.0
            ));
        }
    }
    o
}

/// What the sweep says on stderr about what prices its layouts, where that is a bundled
/// profile or the defaults on a machine one describes (a given profile is the user's own
/// choice and goes unsaid).
fn pricing_note(pricing: &sweep::Pricing, s: &twin_sim::scenario::Scenario) -> Option<String> {
    let b = twin_sim::profile::bundled::for_cluster(&s.cluster)?;
    match pricing {
        sweep::Pricing::Machine => Some(format!(
            "every layout on {} GPUs in {} nodes is priced with the bundled profile {} \
             (--profile FILE prices with another, --profile defaults with twin's A100-fitted \
             defaults)",
            b.gpu, s.cluster.node, b.path
        )),
        sweep::Pricing::Defaults => Some(format!(
            "every layout is priced with twin's A100-fitted defaults, as asked; {} describes \
             {} GPUs in {} nodes and prices them without --profile",
            b.path, b.gpu, s.cluster.node
        )),
        sweep::Pricing::Profile(_) => None,
    }
}

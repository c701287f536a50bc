//! `twin diff`: simulate two scenarios and print their reports side by side with deltas.

use super::load_scenario;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use twin_sim::check::{diff_reports, render_diff};

/// Compare two scenarios: headline figures of both reports side by side, with the change.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin diff scenarios/512xA100.toml new.toml
  twin diff scenarios/512xA100.toml scenarios/512xA100.toml --set-b parallel.pp=16 --set-b parallel.dp=4
  twin diff a.toml b.toml --format markdown     (for a PR comment)

Details: docs/reference/cli.md#twin-diff"
)]
pub struct Args {
    /// The scenario before the change.
    pub a: PathBuf,
    /// The scenario after the change.
    pub b: PathBuf,
    /// Override a key of both scenarios. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Override a key of scenario A only (applied after --set). Repeatable.
    #[arg(long = "set-a", value_name = "KEY=VALUE")]
    pub overrides_a: Vec<String>,
    /// Override a key of scenario B only (applied after --set). Repeatable.
    #[arg(long = "set-b", value_name = "KEY=VALUE")]
    pub overrides_b: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: DiffFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
    Markdown,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let with = |extra: &[String]| {
        let mut all = args.overrides.clone();
        all.extend_from_slice(extra);
        all
    };
    let sa = load_scenario(&args.a, &with(&args.overrides_a))?;
    let sb = load_scenario(&args.b, &with(&args.overrides_b))?;
    let opts = twin_sim::PredictOptions {
        reproducible: true,
        collapse: true,
        ..Default::default()
    };
    // Each scenario priced as `twin simulate` prices it without --profile.
    let machine = twin_sim::profile::bundled::Pricing::Machine;
    let predict = |s: &twin_sim::scenario::Scenario, path: &std::path::Path| {
        let profile = super::pricing::profile_for(&machine, s)?;
        twin_sim::predict_with(s, &opts, profile.as_deref())
            .with_context(|| format!("simulating {}", path.display()))
    };
    let ra = predict(&sa, &args.a)?.report;
    let rb = predict(&sb, &args.b)?.report;
    let rows = diff_reports(&ra, &rb);
    let (na, nb) = (args.a.display().to_string(), args.b.display().to_string());
    let (na, nb) = if na == nb {
        (format!("A: {na}"), format!("B: {nb}"))
    } else {
        (na, nb)
    };
    match args.format {
        DiffFormat::Json => {
            let v = serde_json::json!({ "a": ra, "b": rb, "rows": rows });
            println!("{}", twin_sim::json::document("diff", &v)?);
        }
        DiffFormat::Text => {
            println!("A: {} ({})\nB: {} ({})\n", ra.scenario, na, rb.scenario, nb);
            print!("{}", render_diff(&rows, "A", "B", false));
            println!("\nA {}\nB {}", ra.verdict(), rb.verdict());
        }
        DiffFormat::Markdown => {
            println!(
                "**A**: `{}` ({})  \n**B**: `{}` ({})\n",
                ra.scenario, na, rb.scenario, nb
            );
            print!("{}", render_diff(&rows, "A", "B", true));
        }
    }
    Ok(ExitCode::SUCCESS)
}

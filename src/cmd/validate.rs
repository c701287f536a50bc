//! `twin validate`: predict every published run of a table and print predicted vs published
//! with the error, so anyone can see how far the model is from real clusters.

use super::Format;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Predict published training runs and compare.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin validate data/validation/throughput.toml
  twin validate data/validation/throughput.toml --format json
  twin validate table.toml --profile scenarios/profiles/a100-dgx.toml
  twin validate data/validation/throughput-modern.toml \
      --profile scenarios/profiles/h100-dgx.toml --profile scenarios/profiles/h100-grand-teton.toml

Details: docs/reference/cli.md#twin-validate"
)]
pub struct Args {
    /// Table of published runs (TOML, [[run]] rows).
    pub table: PathBuf,
    /// Output format: a Markdown table, or one JSON object
    /// {"rows":[{"id","field","published","predicted","error","groups","unmodelled"}],
    /// "median_abs_error","max_abs_error","uncovered":[{"id","reason"}],
    /// "groups":[{"group","rows","median_abs_error","max_abs_error","worst"}]}.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Hardware profile TOML (docs/reference/profiles.md) to cost the runs with instead of the
    /// defaults. Repeat it for tables that mix GPUs: each row takes the profile of its GPU.
    #[arg(long, value_name = "FILE")]
    pub profile: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let table = twin_sim::validate::load_table(&args.table)?;
    let mut profiles = Vec::with_capacity(args.profile.len());
    for p in &args.profile {
        profiles.push(twin_sim::profile::load(p)?);
    }
    let validation = twin_sim::validate::validate_table(&table, &profiles)
        .with_context(|| format!("validating {}", args.table.display()))?;
    match args.format {
        Format::Json => println!("{}", validation.to_json()),
        Format::Text => print!("{}", validation.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}

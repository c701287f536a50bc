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
    /// Output format: a Markdown table, or JSON (twin.validate/1, docs/reference/json.md).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Hardware profile TOML (docs/reference/profiles.md) to cost the runs of its GPU with;
    /// repeatable. Rows no given profile describes take their machine's bundled profile, if
    /// any (`defaults`: twin's A100-fitted defaults instead).
    #[arg(long, value_name = "FILE")]
    pub profile: Vec<PathBuf>,
    /// Also write the scenario built for each row to DIR/<row id>.toml (created if missing),
    /// to simulate, inspect or change one row on its own.
    #[arg(long, value_name = "DIR")]
    pub emit_scenarios: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let table = twin_sim::validate::load_table(&args.table)?;
    // Each row takes the given profile of its GPU, else its machine's bundled profile, else
    // the defaults; `--profile defaults` makes the defaults the fallback.
    let mut profiles = Vec::with_capacity(args.profile.len());
    let mut fallback = twin_sim::profile::bundled::Pricing::Machine;
    for p in &args.profile {
        match super::pricing::from_arg(Some(p))? {
            twin_sim::profile::bundled::Pricing::Profile(p) => profiles.push((*p).clone()),
            other => fallback = other,
        }
    }
    if let Some(dir) = &args.emit_scenarios {
        emit_scenarios(&table, dir)?;
    }
    let validation = twin_sim::validate::validate_table(&table, &profiles, &fallback)
        .with_context(|| format!("validating {}", args.table.display()))?;
    match args.format {
        Format::Json => println!("{}", validation.to_json()),
        Format::Text => print!("{}", validation.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes each row's scenario (every case of it, named by row id and field when a row has
/// several) to `dir`; rows that cannot be expressed are skipped (validate reports them).
fn emit_scenarios(table: &twin_sim::validate::Table, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for row in &table.run {
        let Ok(cases) = twin_sim::validate::row_cases(row) else {
            continue;
        };
        let several = cases.len() > 1;
        for case in cases {
            let stem = if several {
                format!("{}-{}", case.id, case.field)
            } else {
                case.id.clone()
            };
            // Row ids are published names; keep the file name to safe characters.
            let stem: String = stem
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = dir.join(format!("{stem}.toml"));
            std::fs::write(&path, twin_sim::scenario::to_toml(&case.scenario))
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

//! `twin check`: simulate scenarios and gate on their `[checks]`, `--expect` bounds and a
//! saved baseline; the CI entry point. Exit 0 when every check passes, 1 when any fails,
//! 2 on bad input.

use super::write_atomic;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use twin_sim::check::{self, CheckFormat, Suite, SuiteRequest};

/// Simulate scenarios and check their results against thresholds (for CI).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin check scenarios/checks/*.toml
  twin check 'scenarios/**/*.toml' --format markdown >> \"$GITHUB_STEP_SUMMARY\"
  twin check scenarios/512xA100.toml --expect 'step_time_s<=8' --expect must_fit
  twin check scenarios/512xA100.toml --baseline old.json --tolerance step_time_s=1%
  twin check scenarios/checks/*.toml --format junit --out twin-check.xml

Details: docs/reference/cli.md#twin-check"
)]
pub struct Args {
    /// Scenario files or glob patterns (quoted globs are expanded by twin; `**` recurses).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: OutFormat,
    /// An extra bound, e.g. 'step_time_s<=9.5', 'mfu>=0.45', 'peak_memory_fraction<=90%',
    /// 'min_mfu=0.4', must_fit. Replaces the scenario's check on the same metric. Repeatable.
    #[arg(long, value_name = "BOUND")]
    pub expect: Vec<String>,
    /// Override a scenario key in every scenario (TOML value syntax). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Saved report(s) (`twin simulate --format json`) to compare against, matched to
    /// scenarios by name (a single baseline with a single scenario is used whatever its name).
    #[arg(long, value_name = "OLD.json")]
    pub baseline: Vec<PathBuf>,
    /// How much worse than the baseline a field may get: FIELD=N% (relative) or FIELD=N
    /// (absolute). Defaults: step_time_s=2%, tokens_per_s=2%, mfu=2%,
    /// peak_memory_bytes=1%, bubble_fraction=0.02, exposed_comm_fraction=0.02. Repeatable.
    #[arg(long, value_name = "FIELD=TOL")]
    pub tolerance: Vec<String>,
    /// Write the output to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Hardware profile TOML that prices every scenario; `defaults` for twin's A100-fitted
    /// defaults. Without it, each scenario's machine's bundled profile, if any, as `twin
    /// simulate` prices it.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutFormat {
    Text,
    Json,
    Markdown,
    Junit,
}

impl From<OutFormat> for CheckFormat {
    fn from(f: OutFormat) -> Self {
        match f {
            OutFormat::Text => CheckFormat::Text,
            OutFormat::Json => CheckFormat::Json,
            OutFormat::Markdown => CheckFormat::Markdown,
            OutFormat::Junit => CheckFormat::Junit,
        }
    }
}

/// Expands glob patterns (sorted, deduplicated); a plain path is kept as given.
pub fn expand_globs(patterns: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in patterns {
        if p.contains(['*', '?', '[']) {
            let mut matched: Vec<PathBuf> = glob::glob(p)
                .with_context(|| format!("bad glob pattern {p:?}"))?
                .filter_map(Result::ok)
                .filter(|x| x.is_file())
                .collect();
            if matched.is_empty() {
                anyhow::bail!("the pattern {p:?} matches no file");
            }
            matched.sort();
            out.extend(matched);
        } else {
            out.push(PathBuf::from(p));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|p| seen.insert(p.clone()));
    Ok(out)
}

/// Bad input: the error and its causes on stderr, exit 2.
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
    let pricing = super::pricing::from_arg(args.profile.as_deref())?;
    let files = match expand_globs(&args.files) {
        Ok(f) => f,
        Err(err) => return Ok(bad_input(err)),
    };
    let suite = Suite::load(&SuiteRequest {
        files: &files,
        expect: &args.expect,
        overrides: &args.overrides,
        baselines: &args.baseline,
        tolerances: &args.tolerance,
        pricing,
    });
    let outcome = match suite.and_then(|s| s.run()) {
        Ok(o) => o,
        Err(err) => return Ok(bad_input(err)),
    };
    for (path, name) in &outcome.unused_baselines {
        eprintln!(
            "warning: baseline {} (scenario {name:?}) matches no checked scenario",
            path.display()
        );
    }
    let out = check::render(&outcome.files, args.format.into());
    match &args.out {
        Some(path) => write_atomic(path, &out)?,
        None => print!("{out}"),
    }
    if outcome.no_checks() {
        eprintln!("note: no checks were defined (add a [checks] section or --expect)");
    }
    Ok(if outcome.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

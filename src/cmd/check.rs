//! `twin check`: simulate scenarios and gate on their `[checks]`, `--expect` bounds and a
//! saved baseline; the CI entry point. Exit 0 when every check passes, 1 when any fails,
//! 2 on bad input.

use super::write_atomic;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use twin_sim::check::{self, CheckFormat, CheckResult, Outcome, ScenarioChecks, Tolerances};
use twin_sim::setup::ScenarioSource;

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

/// Everything read from the command line and the files before any simulation.
struct Inputs {
    scenarios: Vec<(
        PathBuf,
        twin_sim::scenario::Scenario,
        twin_sim::scenario::Checks,
    )>,
    baselines: Vec<(PathBuf, serde_json::Value)>,
    tolerances: Tolerances,
}

fn read_inputs(args: &Args) -> anyhow::Result<Inputs> {
    let expectations = args
        .expect
        .iter()
        .map(|e| check::parse_expect(e))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tolerances = Tolerances::default();
    for t in &args.tolerance {
        let (field, tol) = check::parse_tolerance(t)?;
        tolerances.0.insert(field, tol);
    }
    let mut baselines = Vec::new();
    for path in &args.baseline {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read baseline {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("baseline {} is not JSON", path.display()))?;
        baselines.push((path.clone(), v));
    }
    let mut scenarios = Vec::new();
    for path in expand_globs(&args.files)? {
        let (s, mut checks) = ScenarioSource::read(&path)?.resolve_with_checks(&args.overrides)?;
        for e in &expectations {
            e.apply(&mut checks);
        }
        scenarios.push((path, s, checks));
    }
    Ok(Inputs {
        scenarios,
        baselines,
        tolerances,
    })
}

/// The baseline for `name`: the one whose `scenario` field matches, or the only one when
/// there is one scenario.
fn baseline_for<'a>(inputs: &'a Inputs, name: &str) -> Option<&'a (PathBuf, serde_json::Value)> {
    inputs
        .baselines
        .iter()
        .find(|(_, v)| v.get("scenario").and_then(|s| s.as_str()) == Some(name))
        .or_else(|| {
            (inputs.baselines.len() == 1 && inputs.scenarios.len() == 1)
                .then(|| inputs.baselines.first())
                .flatten()
        })
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::output::check_file(args.out.as_deref(), "--out")?;
    let inputs = match read_inputs(&args) {
        Ok(i) => i,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    let opts = twin_sim::PredictOptions {
        reproducible: true,
        collapse: true,
        ..Default::default()
    };
    let mut files = Vec::new();
    for (path, scenario, checks) in &inputs.scenarios {
        let mut results: Vec<CheckResult> = Vec::new();
        match twin_sim::predict(scenario, &opts) {
            Err(e) => results.push(CheckResult {
                check: "simulate".into(),
                value: None,
                threshold: format!("runs without error ({e})"),
                outcome: Outcome::Fail,
            }),
            Ok(p) => {
                results.extend(check::evaluate(checks, &p.report));
                if let Some((bpath, base)) = baseline_for(&inputs, &scenario.name) {
                    match check::compare_baseline(&p.report, base, &inputs.tolerances) {
                        Ok(rows) => results.extend(rows),
                        Err(e) => {
                            eprintln!("error: baseline {}: {e}", bpath.display());
                            return Ok(ExitCode::from(2));
                        }
                    }
                }
            }
        }
        files.push(ScenarioChecks {
            file: display(path),
            scenario: scenario.name.clone(),
            checks: results,
        });
    }
    if !args.baseline.is_empty() {
        for (bpath, v) in &inputs.baselines {
            let name = v.get("scenario").and_then(|s| s.as_str()).unwrap_or("?");
            let used = files.iter().any(|f| f.scenario == name)
                || (inputs.baselines.len() == 1 && inputs.scenarios.len() == 1);
            if !used {
                eprintln!(
                    "warning: baseline {} (scenario {name:?}) matches no checked scenario",
                    bpath.display()
                );
            }
        }
    }
    let out = check::render(&files, args.format.into());
    match &args.out {
        Some(path) => write_atomic(path, &out)?,
        None => print!("{out}"),
    }
    let failed = files
        .iter()
        .flat_map(|f| &f.checks)
        .any(CheckResult::failed);
    if files.iter().all(|f| f.checks.is_empty()) {
        eprintln!("note: no checks were defined (add a [checks] section or --expect)");
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

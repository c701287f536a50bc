//! A CI suite: scenarios with their checks, `--expect` bounds and saved baselines, simulated
//! and judged together. This is what `twin check` runs; a library user gating a set of
//! scenarios calls [`Suite::load`] then [`Suite::run`].

use super::{
    compare_baseline, evaluate, parse_expect, parse_tolerance, BaselineError, CheckResult,
    ExpectError, Outcome, ScenarioChecks, Tolerances,
};
use crate::profile::bundled::{Pricing, PricingError};
use crate::profile::Profile;
use crate::scenario::{Checks, Scenario, ScenarioError};
use crate::setup::ScenarioSource;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a suite is made of, as a user gives it (paths already expanded).
#[derive(Clone, Debug, Default)]
pub struct SuiteRequest<'a> {
    pub files: &'a [PathBuf],
    /// Extra bounds (`step_time_s<=9.5`, `must_fit`); each replaces the scenario's check on
    /// the same metric.
    pub expect: &'a [String],
    /// `KEY=VALUE` overrides applied to every scenario.
    pub overrides: &'a [String],
    /// Saved `twin simulate --format json` reports.
    pub baselines: &'a [PathBuf],
    /// `FIELD=N%` or `FIELD=N` tolerances over the defaults.
    pub tolerances: &'a [String],
    /// What prices each scenario (by default the bundled profile of its machine, as
    /// `twin simulate` prices it).
    pub pricing: Pricing,
}

/// Why a suite could not be read or compared; all of them are bad input.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error(transparent)]
    Expect(#[from] ExpectError),
    #[error(transparent)]
    Tolerance(BaselineError),
    #[error("cannot read baseline {}", path.display())]
    ReadBaseline {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("baseline {} is not JSON", path.display())]
    BaselineJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Boxed: a located scenario error is large.
    #[error(transparent)]
    Scenario(Box<ScenarioError>),
    /// A baseline matched a scenario but lacks a field the comparison needs.
    #[error("baseline {}: {error}", path.display())]
    Baseline { path: PathBuf, error: BaselineError },
    /// The given profile cannot price a scenario (another GPU). Boxed: it is large.
    #[error("{}: {source}", path.display())]
    Pricing {
        path: PathBuf,
        source: Box<PricingError>,
    },
}

impl From<ScenarioError> for SuiteError {
    fn from(e: ScenarioError) -> Self {
        SuiteError::Scenario(Box::new(e))
    }
}

/// One scenario of a suite, its overrides applied and its checks merged with `--expect`.
#[derive(Clone, Debug)]
pub struct SuiteScenario {
    pub path: PathBuf,
    pub scenario: Scenario,
    pub checks: Checks,
    /// The profile that prices it (`None`: twin's defaults).
    pub profile: Option<Arc<Profile>>,
}

/// A saved report to compare against, matched to a scenario by its `scenario` field.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub path: PathBuf,
    pub report: Value,
}

impl Baseline {
    /// The name of the scenario the baseline reports.
    pub fn scenario(&self) -> Option<&str> {
        self.report.get("scenario").and_then(Value::as_str)
    }
}

/// Everything read before any simulation.
#[derive(Clone, Debug)]
pub struct Suite {
    pub scenarios: Vec<SuiteScenario>,
    pub baselines: Vec<Baseline>,
    pub tolerances: Tolerances,
}

/// The judged suite: one entry per scenario file, and the baselines that matched nothing.
#[derive(Clone, Debug)]
pub struct SuiteOutcome {
    pub files: Vec<ScenarioChecks>,
    /// Baselines no checked scenario used, with the scenario each names (`?` when none).
    pub unused_baselines: Vec<(PathBuf, String)>,
}

impl SuiteOutcome {
    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.files
            .iter()
            .flat_map(|f| &f.checks)
            .any(CheckResult::failed)
    }

    /// Whether no scenario had any check to evaluate.
    pub fn no_checks(&self) -> bool {
        self.files.iter().all(|f| f.checks.is_empty())
    }
}

impl Suite {
    /// Reads the expectations, tolerances, baselines and scenarios of `req`.
    pub fn load(req: &SuiteRequest) -> Result<Suite, SuiteError> {
        let expectations = req
            .expect
            .iter()
            .map(|e| parse_expect(e))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tolerances = Tolerances::default();
        for t in req.tolerances {
            let (field, tol) = parse_tolerance(t).map_err(SuiteError::Tolerance)?;
            tolerances.0.insert(field, tol);
        }
        let baselines = req
            .baselines
            .iter()
            .map(|p| read_baseline(p))
            .collect::<Result<Vec<_>, _>>()?;
        let mut scenarios = Vec::new();
        for path in req.files {
            let (scenario, mut checks) =
                ScenarioSource::read(path)?.resolve_with_checks(req.overrides)?;
            for e in &expectations {
                e.apply(&mut checks);
            }
            let profile =
                req.pricing
                    .profile_for(&scenario)
                    .map_err(|source| SuiteError::Pricing {
                        path: path.clone(),
                        source: Box::new(source),
                    })?;
            scenarios.push(SuiteScenario {
                path: path.clone(),
                scenario,
                checks,
                profile,
            });
        }
        Ok(Suite {
            scenarios,
            baselines,
            tolerances,
        })
    }

    /// The baseline for scenario `name`: the one that names it, or the only one when the suite
    /// has a single scenario and a single baseline.
    pub fn baseline_for(&self, name: &str) -> Option<&Baseline> {
        self.baselines
            .iter()
            .find(|b| b.scenario() == Some(name))
            .or_else(|| self.single_pair().then(|| self.baselines.first()).flatten())
    }

    fn single_pair(&self) -> bool {
        self.baselines.len() == 1 && self.scenarios.len() == 1
    }

    /// Simulates every scenario (collapsed and reproducible) and judges it. A scenario that
    /// fails to simulate is a failed `simulate` check, not an error.
    pub fn run(&self) -> Result<SuiteOutcome, SuiteError> {
        let opts = crate::PredictOptions {
            reproducible: true,
            collapse: true,
            ..Default::default()
        };
        let mut files = Vec::new();
        for s in &self.scenarios {
            let mut results: Vec<CheckResult> = Vec::new();
            match crate::predict_with(&s.scenario, &opts, s.profile.as_deref()) {
                Err(e) => results.push(CheckResult {
                    check: "simulate".into(),
                    value: None,
                    operator: None,
                    threshold: None,
                    threshold_text: format!("runs without error ({e})"),
                    outcome: Outcome::Fail,
                }),
                Ok(p) => {
                    results.extend(evaluate(&s.checks, &p.report));
                    if let Some(b) = self.baseline_for(&s.scenario.name) {
                        let rows = compare_baseline(&p.report, &b.report, &self.tolerances)
                            .map_err(|error| SuiteError::Baseline {
                                path: b.path.clone(),
                                error,
                            })?;
                        results.extend(rows);
                    }
                }
            }
            files.push(ScenarioChecks {
                file: s.path.display().to_string(),
                scenario: s.scenario.name.clone(),
                layout: crate::json::Layout::of(&s.scenario),
                checks: results,
            });
        }
        let unused_baselines = self
            .baselines
            .iter()
            .map(|b| (b, b.scenario().unwrap_or("?")))
            .filter(|(_, name)| !(files.iter().any(|f| f.scenario == *name) || self.single_pair()))
            .map(|(b, name)| (b.path.clone(), name.to_string()))
            .collect();
        Ok(SuiteOutcome {
            files,
            unused_baselines,
        })
    }
}

fn read_baseline(path: &Path) -> Result<Baseline, SuiteError> {
    let text = std::fs::read_to_string(path).map_err(|source| SuiteError::ReadBaseline {
        path: path.to_path_buf(),
        source,
    })?;
    let report = serde_json::from_str(&text).map_err(|source| SuiteError::BaselineJson {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Baseline {
        path: path.to_path_buf(),
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn suite() -> Suite {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/small.toml");
        let expect = ["must_fit".to_string()];
        Suite::load(&SuiteRequest {
            files: &[path],
            expect: &expect,
            ..Default::default()
        })
        .unwrap()
    }

    fn baseline(name: &str) -> Baseline {
        Baseline {
            path: PathBuf::from(format!("{name}.json")),
            report: json!({ "scenario": name }),
        }
    }

    #[test]
    fn a_single_baseline_serves_a_single_scenario_whatever_its_name() {
        let mut s = suite();
        s.baselines = vec![baseline("other")];
        assert!(s.baseline_for(&s.scenarios[0].scenario.name).is_some());
        // It is compared, and it lacks the report's fields.
        let err = s.run().unwrap_err();
        assert!(matches!(err, SuiteError::Baseline { .. }), "{err}");
    }

    #[test]
    fn baselines_naming_no_scenario_are_reported_unused() {
        let mut s = suite();
        s.baselines = vec![baseline("other"), baseline("another")];
        let out = s.run().unwrap();
        let unused: Vec<&str> = out
            .unused_baselines
            .iter()
            .map(|(_, n)| n.as_str())
            .collect();
        assert_eq!(unused, ["other", "another"]);
        assert!(!out.no_checks());
        assert!(!out.failed(), "{:?}", out.files);
    }
}

//! What-if checks for CI: evaluate a scenario's `[checks]` (and `--expect` bounds) against
//! its report, compare a report with a saved baseline under tolerances, and render the
//! results as a text table, JSON, GitHub-flavoured markdown or JUnit XML. `twin check` and
//! `twin diff` are thin layers over this module.

mod baseline;
mod diff;
mod expect;
mod render;
mod suite;

pub use baseline::{
    compare_baseline, parse_tolerance, BaselineError, Tolerance, Tolerances, BASELINE_FIELDS,
};
pub use diff::{diff_reports, render_diff, DiffRow};
pub use expect::{parse_expect, ExpectError, Expectation};
pub use render::{render, CheckFormat, ScenarioChecks};
pub use suite::{Baseline, Suite, SuiteError, SuiteOutcome, SuiteRequest, SuiteScenario};

use crate::report::Report;
use crate::scenario::{Bound, Checks, Metric, Threshold};
use serde::Serialize;

/// The verdict of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum Outcome {
    Pass,
    Fail,
    /// The check cannot be evaluated for this scenario (the reason says why); it does not
    /// fail the run.
    NotEvaluated(String),
}

/// One row of the results table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    /// `max_step_time_s`, `must_fit`, `baseline.step_time_s`, ...
    pub check: String,
    /// The measured value, when there is one.
    pub value: Option<f64>,
    /// How `value` is compared with `threshold`: `<=` or `>=`; `None` for a check that
    /// compares nothing (a scenario that failed to simulate).
    pub operator: Option<&'static str>,
    /// The bound `value` is compared with (for a fit: 1 when fitting is required, else 0).
    pub threshold: Option<f64>,
    /// The bound as written for people: `<= 9.5`, `>= 0.45`, `true`, `<= 7.7 (+2%)`.
    pub threshold_text: String,
    pub outcome: Outcome,
}

impl CheckResult {
    pub fn failed(&self) -> bool {
        self.outcome == Outcome::Fail
    }
}

/// The value of `metric` in `report`; `None` when the report has no such quantity yet
/// (goodput needs a fault model).
pub fn metric_value(report: &Report, metric: Metric) -> Option<f64> {
    Some(match metric {
        Metric::StepTimeS => report.step_time_s,
        Metric::TokensPerS => report.tokens_per_s,
        Metric::TokensPerSPerGpu => report.tokens_per_s_per_gpu,
        Metric::ModelTflopsPerGpu => report.model_tflops_per_gpu,
        Metric::Mfu => report.mfu,
        Metric::Hfu => report.hfu,
        Metric::PeakMemoryFraction => {
            if report.usable_bytes == 0 {
                return None;
            }
            report.peak_memory_bytes as f64 / report.usable_bytes as f64
        }
        Metric::PeakMemoryBytes => report.peak_memory_bytes as f64,
        Metric::BubbleFraction => report.bubble_fraction,
        Metric::ExposedCommFraction => report.exposed_comm_fraction,
        Metric::Goodput => return None,
    })
}

/// Evaluates every check against the report, in the checks' canonical order.
pub fn evaluate(checks: &Checks, report: &Report) -> Vec<CheckResult> {
    let mut out: Vec<CheckResult> = checks
        .thresholds
        .iter()
        .map(|t| evaluate_threshold(t, report))
        .collect();
    if let Some(want) = checks.must_fit {
        out.push(CheckResult {
            check: "must_fit".into(),
            value: Some(if report.fits { 1.0 } else { 0.0 }),
            operator: Some(">="),
            threshold: Some(if want { 1.0 } else { 0.0 }),
            threshold_text: want.to_string(),
            outcome: if !want || report.fits {
                Outcome::Pass
            } else {
                Outcome::Fail
            },
        });
    }
    out
}

fn evaluate_threshold(t: &Threshold, report: &Report) -> CheckResult {
    let threshold_text = format!("{} {}", t.bound.operator(), format_number(t.value));
    let (operator, threshold) = (Some(t.bound.operator()), Some(t.value));
    let Some(value) = metric_value(report, t.metric) else {
        let reason = match t.metric {
            Metric::Goodput => "not evaluated: no [faults] in the scenario".to_string(),
            _ => format!("not evaluated: the report has no {}", t.metric.name()),
        };
        return CheckResult {
            check: t.key(),
            value: None,
            operator,
            threshold,
            threshold_text,
            outcome: Outcome::NotEvaluated(reason),
        };
    };
    let ok = match t.bound {
        Bound::Max => value <= t.value,
        Bound::Min => value >= t.value,
    };
    CheckResult {
        check: t.key(),
        value: Some(value),
        operator,
        threshold,
        threshold_text,
        outcome: if ok { Outcome::Pass } else { Outcome::Fail },
    }
}

/// Short, exact-enough numbers for tables: 4 significant digits, no exponent for everyday
/// magnitudes.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if v.fract() == 0.0 && a < 1e7 {
        return format!("{v:.0}");
    }
    if a != 0.0 && !(1e-3..1e7).contains(&a) {
        return format!("{v:.3e}");
    }
    let digits = if a >= 1000.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 10.0 {
        2
    } else if a >= 1.0 {
        3
    } else {
        4
    };
    format!("{v:.digits$}")
}

#[cfg(test)]
mod tests;

//! Regression gate against a saved report (`twin simulate --format json > OLD.json`): each
//! tracked field of the new report may be worse than the baseline's by at most a tolerance,
//! relative (`step_time_s=2%`) or absolute in the field's unit (`bubble_fraction=0.02`).
//! Better is always fine. Defaults are in [`Tolerances::default`] and docs/reference/ci.md.

use super::{format_number, CheckResult, Outcome};
use crate::report::Report;
use serde_json::Value;
use std::collections::BTreeMap;

/// Fields compared with a baseline, and whether a larger value is worse.
pub const BASELINE_FIELDS: &[(&str, bool)] = &[
    ("step_time_s", true),
    ("tokens_per_s", false),
    ("mfu", false),
    ("peak_memory_bytes", true),
    ("bubble_fraction", true),
    ("exposed_comm_fraction", true),
];

/// How much worse than the baseline a field may get.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// A fraction of the baseline value (2% is 0.02).
    Relative(f64),
    /// An amount in the field's own unit.
    Absolute(f64),
}

impl Tolerance {
    fn describe(self) -> String {
        match self {
            Tolerance::Relative(r) => format!("{}%", (r * 100.0 * 1e6).round() / 1e6),
            Tolerance::Absolute(a) => format_number(a),
        }
    }
    fn allowance(self, base: f64) -> f64 {
        match self {
            Tolerance::Relative(r) => base.abs() * r,
            Tolerance::Absolute(a) => a,
        }
    }
}

/// A tolerance per tracked field.
#[derive(Clone, Debug, PartialEq)]
pub struct Tolerances(pub BTreeMap<String, Tolerance>);

impl Default for Tolerances {
    /// 2% on step time, throughput and MFU (beyond run-to-run noise of a real cluster, and
    /// the simulator itself is deterministic); 1% on peak memory (a real increase is never
    /// noise); 0.02 absolute on the bubble and exposed-communication fractions.
    fn default() -> Self {
        let mut m = BTreeMap::new();
        m.insert("step_time_s".into(), Tolerance::Relative(0.02));
        m.insert("tokens_per_s".into(), Tolerance::Relative(0.02));
        m.insert("mfu".into(), Tolerance::Relative(0.02));
        m.insert("peak_memory_bytes".into(), Tolerance::Relative(0.01));
        m.insert("bubble_fraction".into(), Tolerance::Absolute(0.02));
        m.insert("exposed_comm_fraction".into(), Tolerance::Absolute(0.02));
        Tolerances(m)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaselineError {
    #[error("--tolerance {text}: {message}; allowed: FIELD=N% or FIELD=N (absolute), FIELD one of {fields}")]
    Tolerance {
        text: String,
        message: String,
        fields: String,
    },
    #[error("the baseline has no numeric field `{field}`; is it a `twin simulate --format json` report?")]
    MissingField { field: String },
}

fn field_names() -> String {
    BASELINE_FIELDS
        .iter()
        .map(|(f, _)| *f)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `FIELD=N%` or `FIELD=N`.
pub fn parse_tolerance(text: &str) -> Result<(String, Tolerance), BaselineError> {
    let fail = |message: String| BaselineError::Tolerance {
        text: text.to_string(),
        message,
        fields: field_names(),
    };
    let Some((field, value)) = text.split_once('=') else {
        return Err(fail("expected FIELD=VALUE".into()));
    };
    let field = field.trim();
    if !BASELINE_FIELDS.iter().any(|(f, _)| *f == field) {
        return Err(fail(format!("`{field}` is not a tracked field")));
    }
    let value = value.trim();
    let (digits, relative) = match value.strip_suffix('%') {
        Some(d) => (d.trim(), true),
        None => (value, false),
    };
    let n = match digits.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 => n,
        _ => return Err(fail(format!("`{value}` is not a non-negative number"))),
    };
    let tol = if relative {
        Tolerance::Relative(n / 100.0)
    } else {
        Tolerance::Absolute(n)
    };
    Ok((field.to_string(), tol))
}

fn number(v: &Value, field: &str) -> Result<f64, BaselineError> {
    v.get(field)
        .and_then(Value::as_f64)
        .ok_or_else(|| BaselineError::MissingField {
            field: field.to_string(),
        })
}

/// One row per tracked field (`baseline.step_time_s`, ...) plus `baseline.fits` (a scenario
/// that fitted must still fit).
pub fn compare_baseline(
    report: &Report,
    baseline: &Value,
    tolerances: &Tolerances,
) -> Result<Vec<CheckResult>, BaselineError> {
    let now = serde_json::to_value(report).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for &(field, larger_is_worse) in BASELINE_FIELDS {
        let base = number(baseline, field)?;
        let value = number(&now, field)?;
        let tol = tolerances
            .0
            .get(field)
            .copied()
            .unwrap_or(Tolerance::Relative(0.0));
        let allow = tol.allowance(base);
        let (limit, ok, op) = if larger_is_worse {
            (base + allow, value <= base + allow, "<=")
        } else {
            (base - allow, value >= base - allow, ">=")
        };
        out.push(CheckResult {
            check: format!("baseline.{field}"),
            value: Some(value),
            operator: Some(op),
            threshold: Some(limit),
            threshold_text: format!(
                "{op} {} (baseline {} {} {})",
                format_number(limit),
                format_number(base),
                if larger_is_worse { "+" } else { "-" },
                tol.describe()
            ),
            outcome: if ok { Outcome::Pass } else { Outcome::Fail },
        });
    }
    if let Some(base_fits) = baseline.get("fits").and_then(Value::as_bool) {
        let ok = report.fits || !base_fits;
        out.push(CheckResult {
            check: "baseline.fits".into(),
            value: Some(if report.fits { 1.0 } else { 0.0 }),
            operator: Some(">="),
            threshold: Some(if base_fits { 1.0 } else { 0.0 }),
            threshold_text: format!("true if the baseline fits ({base_fits})"),
            outcome: if ok { Outcome::Pass } else { Outcome::Fail },
        });
    }
    Ok(out)
}

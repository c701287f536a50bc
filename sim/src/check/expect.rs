//! `--expect` bounds from the command line: `step_time_s<=9.5`, `mfu>=0.45`,
//! `peak_memory_fraction<=90%`, the `[checks]` key form `max_step_time_s=9.5`, and
//! `must_fit` (or `must_fit=false`). They are added to a scenario's own checks, replacing a
//! check on the same metric and bound.

use crate::scenario::{parse_check_key, Bound, Checks, Metric, Threshold};

/// One parsed `--expect`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expectation {
    Threshold(Threshold),
    MustFit(bool),
}

impl Expectation {
    /// Adds this expectation to `checks`.
    pub fn apply(self, checks: &mut Checks) {
        match self {
            Expectation::Threshold(t) => checks.set(t),
            Expectation::MustFit(b) => checks.must_fit = Some(b),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--expect {text}: {message}; allowed: METRIC<=VALUE or METRIC>=VALUE (VALUE a number, or a percentage for fractions), a [checks] key as KEY=VALUE, or must_fit; metrics: {metrics}")]
pub struct ExpectError {
    pub text: String,
    pub message: String,
    pub metrics: String,
}

fn err(text: &str, message: impl Into<String>) -> ExpectError {
    ExpectError {
        text: text.to_string(),
        message: message.into(),
        metrics: Metric::ALL
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn number(text: &str, raw: &str) -> Result<f64, ExpectError> {
    let raw = raw.trim();
    let (digits, scale) = match raw.strip_suffix('%') {
        Some(d) => (d.trim(), 0.01),
        None => (raw, 1.0),
    };
    match digits.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(err(text, format!("`{raw}` is not a non-negative number"))),
    }
}

fn metric(text: &str, name: &str) -> Result<Metric, ExpectError> {
    Metric::from_name(name.trim())
        .ok_or_else(|| err(text, format!("unknown metric `{}`", name.trim())))
}

/// Parses one `--expect` argument.
pub fn parse_expect(text: &str) -> Result<Expectation, ExpectError> {
    let t = text.trim();
    for (op, bound) in [("<=", Bound::Max), (">=", Bound::Min)] {
        if let Some((name, value)) = t.split_once(op) {
            return Ok(Expectation::Threshold(Threshold {
                metric: metric(text, name)?,
                bound,
                value: number(text, value)?,
            }));
        }
    }
    let (key, value) = match t.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (t, None),
    };
    if key == "must_fit" {
        return match value {
            None | Some("true") => Ok(Expectation::MustFit(true)),
            Some("false") => Ok(Expectation::MustFit(false)),
            Some(other) => Err(err(
                text,
                format!("must_fit is true or false, not `{other}`"),
            )),
        };
    }
    let Some((metric, bound)) = parse_check_key(key) else {
        return Err(err(
            text,
            format!("`{key}` is neither a [checks] key nor METRIC<=VALUE"),
        ));
    };
    let Some(value) = value else {
        return Err(err(text, format!("`{key}` needs a value: {key}=VALUE")));
    };
    Ok(Expectation::Threshold(Threshold {
        metric,
        bound,
        value: number(text, value)?,
    }))
}

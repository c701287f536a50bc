//! The `[checks]` section: thresholds a CI job gates on (`twin check`). Each key is a bound
//! (`max_` or `min_`) on one metric of the report, plus `must_fit`. The section is parsed with
//! the same located errors as the rest of the scenario, but it is returned beside the
//! [`super::Scenario`] rather than inside it: checks say what a result must be, not what the
//! training job is, so planning and simulation never see them.

use super::read::{Result, Section};
use serde::{Deserialize, Serialize};

/// A report quantity a check can bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    StepTimeS,
    TokensPerS,
    TokensPerSPerGpu,
    ModelTflopsPerGpu,
    Mfu,
    Hfu,
    /// Peak device memory of the worst rank over the GPU's HBM.
    PeakMemoryFraction,
    PeakMemoryBytes,
    BubbleFraction,
    ExposedCommFraction,
    /// Useful work over wall time with failures and restarts; needs `[faults]`.
    Goodput,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::StepTimeS,
        Metric::TokensPerS,
        Metric::TokensPerSPerGpu,
        Metric::ModelTflopsPerGpu,
        Metric::Mfu,
        Metric::Hfu,
        Metric::PeakMemoryFraction,
        Metric::PeakMemoryBytes,
        Metric::BubbleFraction,
        Metric::ExposedCommFraction,
        Metric::Goodput,
    ];

    /// The name used in keys, reports and `--expect` (the report's JSON field name where the
    /// report has one).
    pub fn name(self) -> &'static str {
        match self {
            Metric::StepTimeS => "step_time_s",
            Metric::TokensPerS => "tokens_per_s",
            Metric::TokensPerSPerGpu => "tokens_per_s_per_gpu",
            Metric::ModelTflopsPerGpu => "model_tflops_per_gpu",
            Metric::Mfu => "mfu",
            Metric::Hfu => "hfu",
            Metric::PeakMemoryFraction => "peak_memory_fraction",
            Metric::PeakMemoryBytes => "peak_memory_bytes",
            Metric::BubbleFraction => "bubble_fraction",
            Metric::ExposedCommFraction => "exposed_comm_fraction",
            Metric::Goodput => "goodput",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The bound that makes sense: times, memory and waste have a maximum, rates a minimum.
    pub fn natural_bound(self) -> Bound {
        match self {
            Metric::StepTimeS
            | Metric::PeakMemoryFraction
            | Metric::PeakMemoryBytes
            | Metric::BubbleFraction
            | Metric::ExposedCommFraction => Bound::Max,
            Metric::TokensPerS
            | Metric::TokensPerSPerGpu
            | Metric::ModelTflopsPerGpu
            | Metric::Mfu
            | Metric::Hfu
            | Metric::Goodput => Bound::Min,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The value must be at most the threshold.
    Max,
    /// The value must be at least the threshold.
    Min,
}

impl Bound {
    pub fn prefix(self) -> &'static str {
        match self {
            Bound::Max => "max_",
            Bound::Min => "min_",
        }
    }
    /// `<=` or `>=`.
    pub fn operator(self) -> &'static str {
        match self {
            Bound::Max => "<=",
            Bound::Min => ">=",
        }
    }
}

/// One bound on one metric.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub metric: Metric,
    pub bound: Bound,
    pub value: f64,
}

impl Threshold {
    /// The `[checks]` key: `max_step_time_s`, `min_mfu`, ...
    pub fn key(&self) -> String {
        format!("{}{}", self.bound.prefix(), self.metric.name())
    }
}

/// Every check of a scenario, in canonical order (the order of [`check_keys`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    pub thresholds: Vec<Threshold>,
    /// `must_fit = true`: the peak memory of every rank fits in HBM.
    pub must_fit: Option<bool>,
}

impl Checks {
    pub fn is_empty(&self) -> bool {
        self.thresholds.is_empty() && self.must_fit.is_none()
    }

    /// Adds a threshold, replacing one with the same metric and bound (a later one wins, as
    /// with `--set`), and keeps the canonical order.
    pub fn set(&mut self, t: Threshold) {
        self.thresholds
            .retain(|x| (x.metric, x.bound) != (t.metric, t.bound));
        self.thresholds.push(t);
        self.thresholds
            .sort_by_key(|x| key_position(&x.key()).unwrap_or(usize::MAX));
    }
}

/// The keys `[checks]` accepts, in canonical order (the schema's order). Bounds are the
/// natural ones (see [`Metric::natural_bound`]): `min_step_time_s` would be a strange thing
/// to want.
pub fn check_keys() -> impl Iterator<Item = &'static str> {
    super::keys::checks::ALL.iter().map(|k| k.name)
}

fn key_position(key: &str) -> Option<usize> {
    check_keys().position(|k| k == key)
}

/// The metric and bound a `[checks]` key names (`must_fit` names none).
pub fn parse_key(key: &str) -> Option<(Metric, Bound)> {
    key_position(key)?;
    for bound in [Bound::Max, Bound::Min] {
        if let Some(m) = key.strip_prefix(bound.prefix()).and_then(Metric::from_name) {
            return Some((m, bound));
        }
    }
    None
}

/// Reads `[checks]`; an absent section means no checks.
pub(crate) fn checks(c: Section<'_>) -> Result<Checks> {
    c.check_unknown()?;
    let mut out = Checks::default();
    for key in super::keys::checks::ALL {
        let Some((metric, bound)) = parse_key(key.name) else {
            continue;
        };
        if let Some(f) = c.number(key)? {
            out.thresholds.push(Threshold {
                metric,
                bound,
                value: f.value,
            });
        }
    }
    out.must_fit = c.boolean(&super::keys::checks::MUST_FIT)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_but_must_fit_names_a_natural_bound() {
        for key in check_keys() {
            match parse_key(key) {
                Some((m, b)) => {
                    assert_eq!(m.natural_bound(), b, "{key}");
                    let t = Threshold {
                        metric: m,
                        bound: b,
                        value: 1.0,
                    };
                    assert_eq!(t.key(), key);
                }
                None => assert_eq!(key, "must_fit"),
            }
        }
        assert_eq!(parse_key("min_step_time_s"), None);
        assert_eq!(parse_key("max_nonsense"), None);
    }

    #[test]
    fn set_replaces_and_keeps_canonical_order() {
        let mut c = Checks::default();
        let t = |metric, bound, value| Threshold {
            metric,
            bound,
            value,
        };
        c.set(t(Metric::Mfu, Bound::Min, 0.4));
        c.set(t(Metric::StepTimeS, Bound::Max, 9.0));
        c.set(t(Metric::Mfu, Bound::Min, 0.5));
        assert_eq!(
            c.thresholds,
            vec![
                t(Metric::StepTimeS, Bound::Max, 9.0),
                t(Metric::Mfu, Bound::Min, 0.5)
            ]
        );
    }
}

//! Explicit scale factors for running a scenario on a CPU: `hidden=0.125` shrinks the hidden
//! and FFN sizes, `seq`, `layers` and `batch` the sequence length, layer count and global
//! batch. They apply to the scenario before planning, so the whole schedule shrinks
//! consistently, and every factor applied is reported. Nothing is ever replaced by a sleep.

use std::fmt;
use twin_sim::scenario::Scenario;

/// One `KEY=FACTOR`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleFactor {
    pub key: ScaleKey,
    pub factor: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleKey {
    Hidden,
    Seq,
    Layers,
    Batch,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScaleError {
    #[error("--scale {0:?}: expected KEY=FACTOR with KEY one of hidden, seq, layers, batch")]
    Syntax(String),
    #[error("--scale {key}={factor}: the factor must be a positive number")]
    Factor { key: String, factor: String },
}

impl fmt::Display for ScaleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScaleKey::Hidden => "hidden",
            ScaleKey::Seq => "seq",
            ScaleKey::Layers => "layers",
            ScaleKey::Batch => "batch",
        })
    }
}

impl ScaleFactor {
    pub fn parse(text: &str) -> Result<ScaleFactor, ScaleError> {
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| ScaleError::Syntax(text.to_string()))?;
        let key = match k.trim() {
            "hidden" => ScaleKey::Hidden,
            "seq" => ScaleKey::Seq,
            "layers" => ScaleKey::Layers,
            "batch" => ScaleKey::Batch,
            _ => return Err(ScaleError::Syntax(text.to_string())),
        };
        let factor: f64 = v.trim().parse().map_err(|_| ScaleError::Factor {
            key: k.to_string(),
            factor: v.to_string(),
        })?;
        if !(factor.is_finite() && factor > 0.0) {
            return Err(ScaleError::Factor {
                key: k.to_string(),
                factor: v.to_string(),
            });
        }
        Ok(ScaleFactor { key, factor })
    }
}

/// `value * factor` rounded to a positive multiple of `multiple`.
fn scaled(value: u64, factor: f64, multiple: u64) -> u64 {
    let m = multiple.max(1);
    let v = (value as f64 * factor / m as f64).round().max(1.0) as u64;
    v.saturating_mul(m)
}

/// Apply `factors` to `s`; returns the scaled scenario and one line per change for the report.
/// Sizes stay divisible by what the plan needs (heads and tp for hidden, pp*vpp for layers,
/// micro batch * dp for the batch).
pub fn apply(s: &Scenario, factors: &[ScaleFactor]) -> (Scenario, Vec<String>) {
    let mut out = s.clone();
    let mut notes = Vec::new();
    for f in factors {
        let p = &out.parallel;
        match f.key {
            ScaleKey::Hidden => {
                let old = (out.model.hidden, out.model.ffn_hidden);
                let m = u64::from(out.model.heads) * u64::from(p.tp.max(1));
                out.model.hidden = scaled(old.0, f.factor, m);
                out.model.ffn_hidden = scaled(old.1, f.factor, u64::from(p.tp.max(1)));
                notes.push(format!(
                    "hidden x{}: {} -> {}, ffn_hidden {} -> {}",
                    f.factor, old.0, out.model.hidden, old.1, out.model.ffn_hidden
                ));
            }
            ScaleKey::Seq => {
                let old = out.model.seq_len;
                out.model.seq_len = scaled(old, f.factor, u64::from(p.cp.max(1)) * 2);
                notes.push(format!("seq x{}: {old} -> {}", f.factor, out.model.seq_len));
            }
            ScaleKey::Layers => {
                let old = out.model.layers;
                let m = u64::from(p.pp.max(1)) * u64::from(p.vpp.max(1));
                out.model.layers =
                    u32::try_from(scaled(u64::from(old), f.factor, m)).unwrap_or(old);
                notes.push(format!(
                    "layers x{}: {old} -> {}",
                    f.factor, out.model.layers
                ));
            }
            ScaleKey::Batch => {
                let old = out.training.global_batch;
                let m = out.training.micro_batch.max(1) * u64::from(p.dp.max(1));
                out.training.global_batch = scaled(old, f.factor, m);
                notes.push(format!(
                    "global batch x{}: {old} -> {}",
                    f.factor, out.training.global_batch
                ));
            }
        }
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_applies_keeping_divisibility() {
        let s = twin_sim::testing::small_scenario(2, 2, 1, 4);
        let f = [
            ScaleFactor::parse("hidden=0.125").unwrap(),
            ScaleFactor::parse("layers=0.5").unwrap(),
        ];
        let (t, notes) = apply(&s, &f);
        assert_eq!(t.model.hidden, 128);
        assert_eq!(t.model.hidden % (u64::from(t.model.heads) * 2), 0);
        assert_eq!(t.model.ffn_hidden, 512);
        assert_eq!(t.model.layers, 8);
        assert_eq!(notes.len(), 2);
        assert!(
            notes[0].starts_with("hidden x0.125: 1024 -> 128"),
            "{notes:?}"
        );
        twin_sim::plan::Plan::new(&t).unwrap();
    }

    #[test]
    fn bad_factors_are_errors() {
        assert!(matches!(
            ScaleFactor::parse("width=2"),
            Err(ScaleError::Syntax(_))
        ));
        assert!(matches!(
            ScaleFactor::parse("hidden"),
            Err(ScaleError::Syntax(_))
        ));
        assert!(matches!(
            ScaleFactor::parse("hidden=0"),
            Err(ScaleError::Factor { .. })
        ));
        assert!(matches!(
            ScaleFactor::parse("hidden=x"),
            Err(ScaleError::Factor { .. })
        ));
    }
}

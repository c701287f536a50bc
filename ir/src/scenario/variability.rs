//! The `[variability]` section: how much GPUs, links and single ops differ from the profile's
//! one figure, for `simulate --samples`. Like `[faults]` it is returned beside the
//! [`super::Scenario`]: it says how a real cluster spreads around the prediction, not what one
//! step is, so planning never sees it. twin-sim's `variability` module draws from it.

use super::error::ErrorKind;
use super::keys::variability as k;
use super::read::{opt, Result, Section};
use serde::Serialize;
use std::path::Path;

/// Most numbers a `samples` file may hold.
pub const MAX_SPEED_SAMPLES: usize = 1 << 20;

/// The `[variability]` section with every default filled in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariabilityConfig {
    /// Coefficient of variation of a GPU's compute speed (lognormal, mean 1).
    pub gpu_speed_cv: f64,
    /// Coefficient of variation of a GPU's link bandwidth (lognormal, mean 1).
    pub link_bandwidth_cv: f64,
    /// Coefficient of variation of one compute op's duration (lognormal, mean 1).
    pub step_jitter_cv: f64,
    /// Chance that a node is slow.
    pub slow_node_fraction: f64,
    /// Compute-time factor on a slow node (>= 1).
    pub slow_node_factor: f64,
    /// Measured relative GPU speeds, divided by their median (so the median GPU runs at the
    /// profile's speed); drawn from instead of the lognormal `gpu_speed_cv`.
    pub speed_samples: Option<SpeedSamples>,
}

/// A `samples` file's speeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpeedSamples {
    /// The file as written in the scenario.
    pub path: String,
    /// The speeds divided by their median, in file order.
    pub speeds: Vec<f64>,
}

impl VariabilityConfig {
    /// Whether anything varies at all.
    pub fn varies(&self) -> bool {
        self.gpu_speed_cv > 0.0
            || self.link_bandwidth_cv > 0.0
            || self.step_jitter_cv > 0.0
            || (self.slow_node_fraction > 0.0 && self.slow_node_factor > 1.0)
            || self.speed_samples.is_some()
    }
}

/// Parses `[variability]`; `None` when the scenario has no such section. A `samples` file is
/// read relative to `base_dir` (the scenario file's directory).
pub(crate) fn variability(v: Section<'_>, base_dir: &Path) -> Result<Option<VariabilityConfig>> {
    if v.table.is_none() {
        return Ok(None);
    }
    v.check_unknown()?;
    let slow_node_factor = v.number_or_default(&k::SLOW_NODE_FACTOR)?;
    if slow_node_factor < 1.0 {
        return Err(v.err(
            ErrorKind::Invalid,
            k::SLOW_NODE_FACTOR.name,
            "a slow node's factor is at least 1",
            "numbers from 1 to 100",
        ));
    }
    let gpu_speed_cv = opt(v.number(&k::GPU_SPEED_CV)?);
    let speed_samples = match v.string(&k::SAMPLES)? {
        None => None,
        Some(field) => {
            if gpu_speed_cv.is_some() {
                return Err(v.err(
                    ErrorKind::Invalid,
                    k::SAMPLES.name,
                    "give either `gpu_speed_cv` or `samples`, not both",
                    "",
                ));
            }
            let path = base_dir.join(&field.value);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                v.err(
                    ErrorKind::Io,
                    k::SAMPLES.name,
                    format!("cannot read {}: {e}", path.display()),
                    "a readable file of relative GPU speeds",
                )
            })?;
            let speeds = parse_speeds(&text).map_err(|why| {
                v.err(
                    ErrorKind::Invalid,
                    k::SAMPLES.name,
                    format!("{}: {why}", path.display()),
                    "positive finite numbers, one per line or comma separated; `#` starts a comment",
                )
            })?;
            Some(SpeedSamples {
                path: field.value,
                speeds,
            })
        }
    };
    Ok(Some(VariabilityConfig {
        gpu_speed_cv: gpu_speed_cv.unwrap_or(0.0),
        link_bandwidth_cv: v.number_or_default(&k::LINK_BANDWIDTH_CV)?,
        step_jitter_cv: v.number_or_default(&k::STEP_JITTER_CV)?,
        slow_node_fraction: v.number_or_default(&k::SLOW_NODE_FRACTION)?,
        slow_node_factor,
        speed_samples,
    }))
}

/// The numbers of a samples file divided by their median; the error says which line is wrong.
pub fn parse_speeds(text: &str) -> std::result::Result<Vec<f64>, String> {
    let mut speeds = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for word in line
            .split([',', ' ', '\t'])
            .filter(|w| !w.trim().is_empty())
        {
            let x: f64 = word
                .trim()
                .parse()
                .map_err(|_| format!("line {}: `{}` is not a number", i + 1, word.trim()))?;
            if !(x.is_finite() && x > 0.0) {
                return Err(format!("line {}: {x} is not a positive speed", i + 1));
            }
            if speeds.len() == MAX_SPEED_SAMPLES {
                return Err(format!("more than {MAX_SPEED_SAMPLES} numbers"));
            }
            speeds.push(x);
        }
    }
    if speeds.is_empty() {
        return Err("no numbers".into());
    }
    let mut sorted = speeds.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Ok(speeds.into_iter().map(|x| x / median).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Document;

    const BASE: &str = r#"
[model]
preset = "llama3-8b"
[cluster]
gpu = "a100-sxm-80gb"
gpus = 8
[training]
global_batch = 8
micro_batch = 1
"#;

    fn parse(extra: &str) -> std::result::Result<Option<VariabilityConfig>, String> {
        let text = format!("{BASE}{extra}");
        let doc = Document::parse(&text, "v.toml").map_err(|e| e.to_string())?;
        let v = doc.validate(&[]).map_err(|e| e.to_string())?;
        Ok(v.variability)
    }

    #[test]
    fn absent_section_is_none_and_defaults_vary_nothing() {
        assert_eq!(parse("").unwrap(), None);
        let v = parse("[variability]\n").unwrap().expect("present");
        assert!(!v.varies());
        assert_eq!(v.slow_node_factor, 1.0);
    }

    #[test]
    fn keys_are_read_and_bad_values_are_located() {
        let v = parse("[variability]\ngpu_speed_cv = 0.05\nstep_jitter_cv = 0.02\nslow_node_fraction = 0.1\nslow_node_factor = 1.5\n")
            .unwrap()
            .expect("present");
        assert_eq!(
            (
                v.gpu_speed_cv,
                v.step_jitter_cv,
                v.slow_node_fraction,
                v.slow_node_factor
            ),
            (0.05, 0.02, 0.1, 1.5)
        );
        assert!(v.varies());
        let e = parse("[variability]\nslow_node_factor = 0.5\n").unwrap_err();
        assert!(
            e.contains("variability.slow_node_factor") && e.contains("at least 1"),
            "{e}"
        );
        let e = parse("[variability]\ngpu_sped_cv = 0.1\n").unwrap_err();
        assert!(e.contains("gpu_speed_cv"), "{e}");
        let e = parse("[variability]\nslow_node_fraction = 2\n").unwrap_err();
        assert!(e.contains("slow_node_fraction"), "{e}");
        let e = parse("[variability]\ngpu_speed_cv = 0.1\nsamples = \"x.txt\"\n").unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = parse("[variability]\nsamples = \"/nonexistent/speeds.txt\"\n").unwrap_err();
        assert!(
            e.contains("cannot read") && e.contains("variability.samples"),
            "{e}"
        );
    }

    #[test]
    fn speeds_are_divided_by_their_median_and_bad_lines_named() {
        assert_eq!(
            parse_speeds("# per GPU\n2.0, 4.0\n1.0\n").unwrap(),
            vec![1.0, 2.0, 0.5]
        );
        assert_eq!(parse_speeds("1\n3\n").unwrap(), vec![0.5, 1.5]);
        assert!(parse_speeds("1\nfast\n").unwrap_err().contains("line 2"));
        assert!(parse_speeds("1\n-2\n").unwrap_err().contains("line 2"));
        assert!(parse_speeds("# nothing\n")
            .unwrap_err()
            .contains("no numbers"));
        assert!(parse_speeds("inf\n").is_err());
    }
}

//! The horizon summary: goodput and ETTR with 95% confidence intervals over the Monte Carlo
//! trials, lost time by cause, failure counts and MTTF, and the checkpoint interval sweep;
//! as text and as the JSON object `twin simulate` merges into its report.

use super::{ettr, goodput, Cause, JobFacts, Model, Outcome};
use crate::scenario::FaultConfig;
use serde::Serialize;

const HOUR_NS: f64 = 3_600e9;

/// A Monte Carlo mean with its 95% confidence interval (normal approximation).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

impl Estimate {
    pub fn of(values: impl Iterator<Item = f64>) -> Estimate {
        let v: Vec<f64> = values.collect();
        let n = v.len().max(1) as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = if v.len() > 1 {
            v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let half = 1.96 * (var / n).sqrt();
        Estimate {
            mean,
            ci_low: mean - half,
            ci_high: mean + half,
        }
    }
}

/// One checkpoint interval of the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct IntervalPoint {
    pub interval_ns: u64,
    pub interval_steps: u64,
    pub goodput: Estimate,
    /// Wall time over committed work, minus one (the first-order model's quantity).
    pub overhead_fraction: f64,
}

/// Mean lost hours per trial, by cause.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LostHours {
    pub checkpoint: f64,
    pub rework: f64,
    pub detection: f64,
    pub restart: f64,
    pub reload: f64,
    /// Stragglers, degraded links and elastic shrink: wall time beyond full-speed work.
    pub slowdown: f64,
}

/// What the horizon simulation reports. In JSON (docs/reference/json.md, `faults`) every
/// single duration is an integer `_ns` field (the `_s` and `_hours` fields here are for
/// people), and the estimates over trials of MTTF and lost time are floats in hours.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HorizonReport {
    pub goodput: Estimate,
    pub ettr: Estimate,
    #[serde(rename = "horizon_ns", serialize_with = "hours_as_ns")]
    pub horizon_hours: f64,
    pub seeds: u32,
    #[serde(rename = "step_time_ns", serialize_with = "seconds_as_ns")]
    pub step_time_s: f64,
    pub checkpoint_bytes: u64,
    pub checkpoint_interval_steps: u64,
    #[serde(rename = "checkpoint_stall_ns", serialize_with = "seconds_as_ns")]
    pub checkpoint_stall_s: f64,
    #[serde(rename = "reload_ns", serialize_with = "seconds_as_ns")]
    pub reload_s: f64,
    #[serde(rename = "recovery_ns", serialize_with = "seconds_as_ns")]
    pub recovery_s: f64,
    /// Mean failures per trial, by cause (gpu, node, link, scheduled) and in total.
    pub expected_failures: Estimate,
    /// In JSON an object, cause to mean failures per trial.
    #[serde(serialize_with = "as_object")]
    pub failures_by_cause: Vec<(String, f64)>,
    /// Mean time between failures implied by the simulated failure counts.
    pub mttf_hours: Estimate,
    pub lost_hours: LostHours,
    pub best_interval_steps: u64,
    pub best_interval_goodput: f64,
    pub young_interval_steps: f64,
    pub daly_interval_steps: f64,
    pub sweep: Vec<IntervalPoint>,
    pub config: FaultConfig,
}

/// Seconds as whole nanoseconds (rounded).
fn seconds_as_ns<S: serde::Serializer>(s: &f64, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_u64((s * 1e9).round().max(0.0) as u64)
}

/// Hours as whole nanoseconds (rounded).
fn hours_as_ns<S: serde::Serializer>(h: &f64, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_u64((h * HOUR_NS).round().max(0.0) as u64)
}

/// Pairs as an object, in their order.
fn as_object<S: serde::Serializer>(pairs: &[(String, f64)], out: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = out.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

impl HorizonReport {
    pub(crate) fn build(
        config: &FaultConfig,
        job: &JobFacts,
        model: &Model,
        outs: &[Outcome],
        sweep: Vec<IntervalPoint>,
    ) -> HorizonReport {
        let h = model.horizon_ns;
        let n = outs.len().max(1) as f64;
        let mean_h = |f: &dyn Fn(&Outcome) -> u64| {
            outs.iter().map(|o| f(o) as f64).sum::<f64>() / n / HOUR_NS
        };
        let total = |o: &Outcome| o.failures.iter().sum::<u64>();
        let failures = Estimate::of(outs.iter().map(|o| total(o) as f64));
        let horizon_hours = h as f64 / HOUR_NS;
        // Failure rate per hour with its CI, inverted into an MTTF.
        let rate = Estimate::of(outs.iter().map(|o| total(o) as f64 / horizon_hours));
        let inv = |r: f64| if r > 0.0 { 1.0 / r } else { f64::INFINITY };
        let mttf_hours = Estimate {
            mean: inv(rate.mean),
            ci_low: inv(rate.ci_high),
            ci_high: inv(rate.ci_low),
        };
        let best = sweep
            .iter()
            .copied()
            .fold(None::<IntervalPoint>, |b, p| match b {
                Some(b) if b.goodput.mean >= p.goodput.mean => Some(b),
                _ => Some(p),
            });
        let step_s = model.step_time_ns as f64 / 1e9;
        let delta_s = model.blocking_ns as f64 / 1e9;
        let mtbf_s = model.mtbf_ns() / 1e9;
        let to_steps = |s: f64| if step_s > 0.0 { s / step_s } else { 0.0 };
        HorizonReport {
            goodput: Estimate::of(outs.iter().map(|o| goodput(o, h))),
            ettr: Estimate::of(outs.iter().map(|o| ettr(o, h))),
            horizon_hours,
            seeds: config.seeds,
            step_time_s: step_s,
            checkpoint_bytes: config.checkpoint_bytes.unwrap_or(job.checkpoint_bytes),
            checkpoint_interval_steps: model.interval_ns / model.step_time_ns.max(1),
            checkpoint_stall_s: delta_s,
            reload_s: model.reload_ns as f64 / 1e9,
            recovery_s: (model.detection_ns + model.restart_ns + model.reload_ns) as f64 / 1e9,
            expected_failures: failures,
            failures_by_cause: Cause::ALL
                .iter()
                .map(|c| {
                    let m = outs
                        .iter()
                        .map(|o| o.failures[*c as usize] as f64)
                        .sum::<f64>()
                        / n;
                    (c.name().to_string(), m)
                })
                .collect(),
            mttf_hours,
            lost_hours: LostHours {
                checkpoint: mean_h(&|o| o.checkpoint_ns),
                rework: mean_h(&|o| o.rework_ns),
                detection: mean_h(&|o| o.detection_ns),
                restart: mean_h(&|o| o.restart_ns),
                reload: mean_h(&|o| o.reload_ns),
                slowdown: mean_h(&|o| o.useful_wall_ns.saturating_sub(o.work_ns)),
            },
            best_interval_steps: best.map(|b| b.interval_steps).unwrap_or(0),
            best_interval_goodput: best.map(|b| b.goodput.mean).unwrap_or(0.0),
            young_interval_steps: to_steps(super::young_interval(delta_s, mtbf_s)),
            daly_interval_steps: to_steps(super::daly_interval(delta_s, mtbf_s)),
            sweep,
            config: config.clone(),
        }
    }

    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    pub fn to_text(&self) -> String {
        let e = |x: &Estimate| format!("{:.4} (95% CI {:.4}-{:.4})", x.mean, x.ci_low, x.ci_high);
        let l = &self.lost_hours;
        let mut s = String::new();
        s.push_str(&format!(
            "\nFaults over {:.0} h, {} seeds (step {:.3} s, checkpoint {:.1} GB every {} steps, stall {:.1} s)\n",
            self.horizon_hours,
            self.seeds,
            self.step_time_s,
            self.checkpoint_bytes as f64 / 1e9,
            self.checkpoint_interval_steps,
            self.checkpoint_stall_s
        ));
        s.push_str(&format!("  goodput            {}\n", e(&self.goodput)));
        s.push_str(&format!("  ETTR               {}\n", e(&self.ettr)));
        s.push_str(&format!(
            "  failures           {:.2} per run (95% CI {:.2}-{:.2}); MTTF {:.2} h\n",
            self.expected_failures.mean,
            self.expected_failures.ci_low,
            self.expected_failures.ci_high,
            self.mttf_hours.mean
        ));
        let by: Vec<String> = self
            .failures_by_cause
            .iter()
            .map(|(c, m)| format!("{c} {m:.2}"))
            .collect();
        s.push_str(&format!("    by cause         {}\n", by.join(", ")));
        s.push_str(&format!(
            "  lost hours         checkpoint {:.1}, rework {:.1}, detection {:.1}, restart {:.1}, reload {:.1}, slowdown {:.1}\n",
            l.checkpoint, l.rework, l.detection, l.restart, l.reload, l.slowdown
        ));
        s.push_str(&format!(
            "  best interval      {} steps (goodput {:.4}); Young {:.0}, Daly {:.0} steps\n",
            self.best_interval_steps,
            self.best_interval_goodput,
            self.young_interval_steps,
            self.daly_interval_steps
        ));
        s
    }
}

//! One `twin simulate`: the prediction of a scenario's step, with the step time's 95% interval
//! when a profile has fitted parameters, and the failures and restarts over a horizon when a
//! fault model is asked for; rendered as the text report or one JSON object. A library user
//! wanting everything `twin simulate` prints calls [`simulate`] and [`Simulation::to_text`] or
//! [`Simulation::to_json`].

use crate::engine::SimError;
use crate::faults::time_to_train::{time_to_train, TimeToTrain};
use crate::faults::{simulate_horizon_trials, FaultsError, HorizonReport, JobFacts};
use crate::plan::Plan;
use crate::profile::Profile;
use crate::scenario::{FaultConfig, Scenario, VariabilityConfig};
use crate::variability::{sample_steps, VariabilityError, VariabilityReport};
use crate::{predict_with, sim_options, PredictError, PredictOptions, Prediction};

/// What to simulate beyond the step itself.
#[derive(Clone, Copy)]
pub struct SimulateOptions<'a> {
    pub predict: &'a PredictOptions,
    /// A hardware profile whose parameters replace the defaults.
    pub profile: Option<&'a Profile>,
    /// Draws of the profile's fitted parameters for the step time's 95% interval, and samples
    /// of the step under `variability`.
    pub samples: u32,
    /// The scenario's `[variability]`: sample the step on varied clusters (see
    /// [`crate::variability`]).
    pub variability: Option<&'a VariabilityConfig>,
    /// Called with the number of finished variability samples, from any thread.
    pub sample_progress: Option<&'a (dyn Fn(usize) + Sync)>,
    /// The fault model to run over the simulated step (see [`horizon_config`]).
    pub horizon: Option<&'a FaultConfig>,
    /// Called with the number of finished horizon trials, from any thread.
    pub progress: Option<&'a (dyn Fn(usize) + Sync)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// `origin` names the scenario (its file).
    #[error("simulating {origin}")]
    Predict {
        origin: String,
        source: PredictError,
    },
    #[error("propagating the profile's uncertainty")]
    Uncertainty(#[source] SimError),
    #[error("simulating the horizon")]
    Horizon(#[source] FaultsError),
    #[error("sampling the step under [variability]")]
    Variability(#[source] VariabilityError),
}

/// A simulated step and what was asked for beside it.
pub struct Simulation {
    pub prediction: Prediction,
    /// The step time's 95% interval in seconds, from the profile's fitted parameters.
    pub step_time_ci95_s: Option<[f64; 2]>,
    pub horizon: Option<HorizonReport>,
    /// The step's spread under `[variability]`, when the scenario has it.
    pub variability: Option<VariabilityReport>,
    /// The time to train on `training.tokens`, with a horizon and that key.
    pub time_to_train: Option<TimeToTrain>,
    /// Where each pipeline stage's step goes, by class of work, when asked for
    /// ([`Simulation::stage_classes`]; `twin simulate --breakdown`).
    pub time_by_class: Option<Vec<StageClasses>>,
}

/// One pipeline stage's step by class of work: the representative rank's (the stage's rank
/// with every other coordinate zero), each instant counted once, the classes summing to the
/// step ([`crate::verify::predicted_classes`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StageClasses {
    pub stage: u32,
    pub rank: u32,
    pub step_time_s: f64,
    pub gemm_s: f64,
    pub attention_s: f64,
    /// Memory-bound kernels: norms, activations, casts, copies, losses, launches.
    pub elementwise_s: f64,
    pub optimizer_s: f64,
    /// Communication with no compute running.
    pub exposed_comm_s: f64,
    /// Nothing running: pipeline bubbles, waits for peers or for the host.
    pub idle_s: f64,
}

/// The fault model to run: the scenario's `[faults]`, or the defaults when only a horizon is
/// asked for; `horizon_ns` and `seeds` override its own.
pub fn horizon_config(
    faults: Option<FaultConfig>,
    horizon_ns: Option<u64>,
    seeds: Option<u32>,
) -> Option<FaultConfig> {
    let mut c = match (faults, horizon_ns) {
        (None, None) => return None,
        (f, _) => f.unwrap_or_default(),
    };
    if let Some(h) = horizon_ns {
        c.horizon_ns = h;
    }
    if let Some(n) = seeds {
        c.seeds = n;
    }
    Some(c)
}

/// Predicts `scenario` (planned as `plan`; `origin` names it in errors), then its interval
/// and horizon as `opts` asks.
pub fn simulate(
    scenario: &Scenario,
    plan: &Plan,
    origin: &str,
    opts: &SimulateOptions,
) -> Result<Simulation, SimulateError> {
    let prediction = predict_with(scenario, opts.predict, opts.profile).map_err(|source| {
        SimulateError::Predict {
            origin: origin.to_string(),
            source,
        }
    })?;
    let ci95_ns = match opts.profile {
        Some(p) => crate::uncertainty::step_time_ci95(
            &prediction.staged,
            p,
            opts.samples,
            scenario.run.seed,
            &sim_options(scenario, opts.predict),
        )
        .map_err(SimulateError::Uncertainty)?,
        None => None,
    };
    let variability = opts
        .variability
        .map(|config| {
            sample_steps(
                &prediction.staged,
                config,
                opts.samples,
                scenario.run.seed,
                &sim_options(scenario, opts.predict),
                prediction.result.step_time_ns,
                opts.sample_progress,
            )
        })
        .transpose()
        .map_err(SimulateError::Variability)?;
    let report = &prediction.report;
    let trials = opts
        .horizon
        .map(|config| {
            let job = JobFacts::from_scenario(
                scenario,
                plan,
                (report.step_time_s * 1e9).round() as u64,
                report.exposed_comm_fraction,
            );
            simulate_horizon_trials(config, &job, opts.progress).map(|r| (config, r))
        })
        .transpose()
        .map_err(SimulateError::Horizon)?;
    let time_to_train = match (&trials, scenario.training.tokens) {
        (Some((config, (_, outs))), Some(tokens)) => {
            // Each trial steps at a variability sample's step time, in turn, where there are
            // samples; else at the prediction's.
            let steps: Vec<u64> = match &variability {
                Some(v) => v.each.iter().map(|x| x.step_time_ns).collect(),
                None => vec![prediction.result.step_time_ns],
            };
            let per_step = scenario
                .training
                .global_batch
                .saturating_mul(scenario.model.seq_len);
            Some(time_to_train(
                tokens,
                per_step,
                outs,
                config.horizon_ns,
                &steps,
            ))
        }
        _ => None,
    };
    let horizon = trials.map(|(_, (report, _))| report);
    Ok(Simulation {
        step_time_ci95_s: ci95_ns.map(|[lo, hi]| [lo as f64 * 1e-9, hi as f64 * 1e-9]),
        prediction,
        horizon,
        variability,
        time_to_train,
        time_by_class: None,
    })
}

impl Simulation {
    /// Each pipeline stage's step by class of work, from the trace of its representative rank
    /// ([`crate::trace::representative_ranks`]); `None` when the prediction holds no trace of
    /// one of them (simulate with `PredictOptions::trace` and those ranks).
    pub fn stage_classes(&self) -> Option<Vec<StageClasses>> {
        use crate::verify::WorkClass as W;
        let p = &self.prediction;
        let trace = p.result.trace.as_ref()?;
        let reps = crate::trace::representative_ranks(&p.staged.plan);
        let mut out = Vec::with_capacity(reps.len());
        for (stage, &rank) in reps.iter().enumerate() {
            if !trace.events.iter().any(|e| e.rank == rank) {
                return None;
            }
            let c = crate::verify::predicted_classes(
                &p.staged.schedule,
                &p.result,
                &p.staged.cost,
                rank,
            );
            let s = |w: W| c.get(w) as f64 * 1e-9;
            out.push(StageClasses {
                stage: u32::try_from(stage).unwrap_or(u32::MAX),
                rank,
                step_time_s: c.step_ns as f64 * 1e-9,
                gemm_s: s(W::Gemm),
                attention_s: s(W::Attention),
                elementwise_s: s(W::Elementwise),
                optimizer_s: s(W::Optimizer),
                exposed_comm_s: s(W::Communication),
                idle_s: s(W::Idle),
            });
        }
        Some(out)
    }

    /// The `twin.simulate/1` document: the report, then `step_time_ci95_s`, `variability`,
    /// `goodput`, `ettr`, `faults` and `time_to_train` when they were simulated
    /// (docs/reference/json.md).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            #[serde(flatten)]
            report: &'a crate::report::Report,
            #[serde(skip_serializing_if = "Option::is_none")]
            step_time_ci95_s: Option<[f64; 2]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            variability: Option<serde_json::Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            goodput: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ettr: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            faults: Option<&'a HorizonReport>,
            #[serde(skip_serializing_if = "Option::is_none")]
            time_to_train: Option<&'a TimeToTrain>,
            #[serde(skip_serializing_if = "Option::is_none")]
            time_by_class: Option<&'a [StageClasses]>,
        }
        let h = self.horizon.as_ref();
        crate::json::document(
            "simulate",
            &Body {
                report: &self.prediction.report,
                step_time_ci95_s: self.step_time_ci95_s,
                variability: self.variability.as_ref().map(|v| self.variability_json(v)),
                goodput: h.map(|h| h.goodput.mean),
                ettr: h.map(|h| h.ettr.mean),
                faults: h,
                time_to_train: self.time_to_train.as_ref(),
                time_by_class: self.time_by_class.as_deref(),
            },
        )
    }

    /// The text report: the step time with its interval, a note on collapsed ranks, the
    /// per-stage memory when `memory`, and the horizon.
    pub fn to_text(&self, memory: bool) -> String {
        let report = &self.prediction.report;
        let mut out = String::new();
        for line in report.to_text().lines() {
            let line = match self.step_time_ci95_s {
                Some([lo, hi]) if line.starts_with("step time") => format!(
                    "step time       {:.3} ms (95% CI {:.3}\u{2013}{:.3} ms)",
                    report.step_time_s * 1e3,
                    lo * 1e3,
                    hi * 1e3
                ),
                _ if line.starts_with("simulated") && self.prediction.result.collapsed => {
                    format!("{line} (representative ranks; --full simulates every rank)")
                }
                _ => line.to_string(),
            };
            out.push_str(&line);
            out.push('\n');
        }
        if memory {
            out.push_str(&report.memory_text());
        }
        if let Some(stages) = &self.time_by_class {
            out.push_str(&time_by_class_text(stages));
        }
        if let Some(v) = &self.variability {
            out.push_str(&self.variability_text(v));
        }
        if let Some(h) = &self.horizon {
            out.push_str(&h.to_text());
        }
        if let Some(t) = &self.time_to_train {
            out.push_str(&time_to_train_text(t));
        }
        out
    }

    /// Tokens per second and MFU at a step time of `step_ns` (both scale as its inverse).
    fn rates_at(&self, step_ns: u64) -> (f64, f64) {
        let report = &self.prediction.report;
        let scale = report.step_time_s * 1e9 / (step_ns.max(1) as f64);
        (report.tokens_per_s_per_gpu * scale, report.mfu * scale)
    }

    fn variability_json(&self, v: &VariabilityReport) -> serde_json::Value {
        let at = |ns: u64| {
            let (tokens, mfu) = self.rates_at(ns);
            serde_json::json!({
                "step_time_ns": ns,
                "step_time_s": ns as f64 * 1e-9,
                "tokens_per_s_per_gpu": tokens,
                "mfu": mfu,
            })
        };
        serde_json::json!({
            "samples": v.samples,
            "deterministic_step_time_ns": v.deterministic_step_time_ns,
            "p50": at(v.step_time_ns.p50),
            "p95": at(v.step_time_ns.p95),
            "p99": at(v.step_time_ns.p99),
            "mean_step_time_ns": v.mean_step_time_ns,
            "min_step_time_ns": v.min_step_time_ns,
            "max_step_time_ns": v.max_step_time_ns,
            "paced_slowest": v.paced_slowest,
        })
    }

    fn variability_text(&self, v: &VariabilityReport) -> String {
        let ms = |ns: u64| ns as f64 * 1e-6;
        let mut out = format!(
            "\nvariability     {} samples, every rank simulated; without variation {:.3} ms\n",
            v.samples,
            ms(v.deterministic_step_time_ns)
        );
        out.push_str("  percentile  step time ms  tokens/s per GPU     MFU\n");
        for (name, ns) in [
            ("P50", v.step_time_ns.p50),
            ("P95", v.step_time_ns.p95),
            ("P99", v.step_time_ns.p99),
        ] {
            let (tokens, mfu) = self.rates_at(ns);
            out.push_str(&format!(
                "  {name:>10}  {:>12.3}  {:>16}  {:>5.1}%\n",
                ms(ns),
                crate::report::group_thousands(tokens),
                mfu * 100.0
            ));
        }
        if !v.paced_slowest.is_empty() {
            let ranks: Vec<String> = v
                .paced_slowest
                .iter()
                .take(5)
                .map(|p| format!("rank {} ({})", p.rank, p.samples))
                .collect();
            out.push_str(&format!(
                "  paced the samples at or above P95 (slowest compute): {}\n",
                ranks.join(", ")
            ));
        }
        out
    }
}

/// The time to train as text: days per percentile, then goodput and ETTR.
fn time_to_train_text(t: &TimeToTrain) -> String {
    let days = |ns: Option<u64>| match ns {
        Some(ns) => format!("{:.2} d", ns as f64 / 86_400e9),
        None => "never (a trial kept no work)".to_string(),
    };
    format!(
        "\ntime to train   {} tokens = {} steps of {} tokens, over {} trials\n  \
         P10 {}   P50 {}   P90 {}\n  goodput P10/P50/P90 {:.4} / {:.4} / {:.4}   \
         ETTR {:.4} / {:.4} / {:.4}\n",
        crate::report::group_thousands(t.tokens as f64),
        crate::report::group_thousands(t.steps as f64),
        crate::report::group_thousands(t.tokens_per_step as f64),
        t.trials,
        days(t.time_p10_ns),
        days(t.time_p50_ns),
        days(t.time_p90_ns),
        t.goodput.p10,
        t.goodput.p50,
        t.goodput.p90,
        t.ettr.p10,
        t.ettr.p50,
        t.ettr.p90,
    )
}

/// The text of [`Simulation::time_by_class`]: one row per stage, milliseconds and the share of
/// the step.
fn time_by_class_text(stages: &[StageClasses]) -> String {
    use std::fmt::Write as _;
    let mut o = String::from(
        "\nwhere the step goes, per stage (its representative rank; ms and % of the step)\n  \
         stage  rank          gemm     attention   elementwise     optimizer  exposed comm          idle\n",
    );
    for c in stages {
        let cell = |s: f64| {
            let share = if c.step_time_s > 0.0 {
                s / c.step_time_s * 100.0
            } else {
                0.0
            };
            format!("{:>8.1} {:>3.0}%", s * 1e3, share)
        };
        let _ = writeln!(
            o,
            "  {:>5} {:>5} {} {} {} {} {} {}",
            c.stage,
            c.rank,
            cell(c.gemm_s),
            cell(c.attention_s),
            cell(c.elementwise_s),
            cell(c.optimizer_s),
            cell(c.exposed_comm_s),
            cell(c.idle_s)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_fault_model_without_faults_or_a_horizon() {
        assert!(horizon_config(None, None, Some(5)).is_none());
    }

    #[test]
    fn a_horizon_alone_runs_the_default_model_and_flags_override_the_scenario() {
        let c = horizon_config(None, Some(7), None).unwrap();
        assert_eq!(c.horizon_ns, 7);
        assert_eq!(c.seeds, FaultConfig::default().seeds);
        let scenario = FaultConfig {
            seeds: 3,
            ..FaultConfig::default()
        };
        let c = horizon_config(Some(scenario.clone()), None, Some(9)).unwrap();
        assert_eq!((c.horizon_ns, c.seeds), (scenario.horizon_ns, 9));
    }
}

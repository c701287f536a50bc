//! One `twin simulate`: the prediction of a scenario's step, with the step time's 95% interval
//! when a profile has fitted parameters, and the failures and restarts over a horizon when a
//! fault model is asked for; rendered as the text report or one JSON object. A library user
//! wanting everything `twin simulate` prints calls [`simulate`] and [`Simulation::to_text`] or
//! [`Simulation::to_json`].

use crate::engine::SimError;
use crate::faults::{simulate_horizon, FaultsError, HorizonReport, JobFacts};
use crate::plan::Plan;
use crate::profile::Profile;
use crate::scenario::{FaultConfig, Scenario};
use crate::{predict_with, sim_options, PredictError, PredictOptions, Prediction};

/// What to simulate beyond the step itself.
#[derive(Clone, Copy)]
pub struct SimulateOptions<'a> {
    pub predict: &'a PredictOptions,
    /// A hardware profile whose parameters replace the defaults.
    pub profile: Option<&'a Profile>,
    /// Draws of the profile's fitted parameters for the step time's 95% interval.
    pub samples: u32,
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
}

/// A simulated step and what was asked for beside it.
pub struct Simulation {
    pub prediction: Prediction,
    /// The step time's 95% interval in seconds, from the profile's fitted parameters.
    pub step_time_ci95_s: Option<[f64; 2]>,
    pub horizon: Option<HorizonReport>,
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
    let report = &prediction.report;
    let horizon = opts
        .horizon
        .map(|config| {
            let job = JobFacts::from_scenario(
                scenario,
                plan,
                (report.step_time_s * 1e9).round() as u64,
                report.exposed_comm_fraction,
            );
            simulate_horizon(config, &job, opts.progress)
        })
        .transpose()
        .map_err(SimulateError::Horizon)?;
    Ok(Simulation {
        step_time_ci95_s: ci95_ns.map(|[lo, hi]| [lo as f64 * 1e-9, hi as f64 * 1e-9]),
        prediction,
        horizon,
    })
}

impl Simulation {
    /// The `twin.simulate/1` document: the report, then `step_time_ci95_s`, `goodput`,
    /// `ettr` and `faults` when they were simulated (docs/reference/json.md).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            #[serde(flatten)]
            report: &'a crate::report::Report,
            #[serde(skip_serializing_if = "Option::is_none")]
            step_time_ci95_s: Option<[f64; 2]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            goodput: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ettr: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            faults: Option<&'a HorizonReport>,
        }
        let h = self.horizon.as_ref();
        crate::json::document(
            "simulate",
            &Body {
                report: &self.prediction.report,
                step_time_ci95_s: self.step_time_ci95_s,
                goodput: h.map(|h| h.goodput.mean),
                ettr: h.map(|h| h.ettr.mean),
                faults: h,
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
        if let Some(h) = &self.horizon {
            out.push_str(&h.to_text());
        }
        out
    }
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

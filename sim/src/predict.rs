//! The prediction pipeline in one place: scenario → plan → schedule → validation → event
//! simulation → report. The CLI, the benchmark, sweeps and the TUI all call this, so they all
//! predict the same thing.

use crate::cost::Analytic;
use crate::engine::{simulate_on, SimError, SimOptions, SimResult};
use crate::plan::{Plan, PlanError};
use crate::profile::{check_matches, GpuMismatch, Profile};
use crate::report::{InterruptedSteps, Report};
use crate::scenario::Scenario;
use crate::schedule::{generate, Schedule, ScheduleError, ValidationError};
use crate::topology::Network;
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error("planning failed: {0}")]
    Plan(#[from] PlanError),
    #[error("schedule generation failed: {0}")]
    Schedule(#[from] ScheduleError),
    #[error("the generated schedule is not executable: {0}")]
    Invalid(#[from] ValidationError),
    #[error("simulation failed: {0}")]
    Sim(#[from] SimError),
    #[error("{0}")]
    Profile(#[from] GpuMismatch),
}

/// A scenario resolved as far as its schedule, ready to simulate (possibly many times).
pub struct Staged {
    pub scenario: Scenario,
    pub plan: Plan,
    pub schedule: Schedule,
    pub cost: Analytic,
    /// The flow-level network when the scenario asks for it (`[cluster.topology] model =
    /// "flow"`); `None` prices transfers per call.
    pub network: Option<Network>,
}

impl Staged {
    /// Plan and generate; does not validate (see [`Staged::validate`]).
    pub fn new(scenario: &Scenario) -> Result<Staged, PredictError> {
        Staged::with_profile(scenario, None)
    }

    /// As [`Staged::new`], costed by `profile` when given (which must describe the
    /// scenario's GPU) instead of the default model.
    pub fn with_profile(
        scenario: &Scenario,
        profile: Option<&Profile>,
    ) -> Result<Staged, PredictError> {
        if let Some(p) = profile {
            check_matches(scenario, p)?;
        }
        let mut cost = Analytic::priced(scenario, profile);
        let plan = Plan::new(scenario)?;
        let schedule = generate(scenario, &plan)?;
        if cost.state_cache.is_some() {
            cost.node_step_bytes = Some(crate::cost::footprint::node_step_bytes(&schedule, &plan));
        }
        let network = Network::for_cluster(&scenario.cluster, &cost.links)
            .map(|n| n.with_expert_dispatch(cost.expert_dispatch));
        let scenario = cost.with_priced_peak(scenario).into_owned();
        Ok(Staged {
            scenario,
            plan,
            schedule,
            cost,
            network,
        })
    }

    /// Checks each program once ([`Schedule::validate_programs`]): what a run on
    /// representative ranks needs, whose engine proves and checks the rest (its collapse maps
    /// every representative's peers to representatives, and it matches the transfers and
    /// collectives it runs). Proportional to the programs, not to the world.
    pub fn validate_programs(&self) -> Result<(), PredictError> {
        self.schedule.validate_programs(&self.plan)?;
        Ok(())
    }

    /// Proves the schedule executable by running every rank untimed; refused beforehand when
    /// that run would process more than the engine's event bound.
    pub fn validate(&self) -> Result<(), PredictError> {
        self.check_events()?;
        self.schedule.validate(&self.plan)?;
        Ok(())
    }

    /// [`Staged::validate`] but the dry run ([`Schedule::validate_but_dry_run`]): for a run
    /// of every rank, which stops where the dry run would.
    pub fn validate_but_dry_run(&self) -> Result<(), PredictError> {
        self.check_events()?;
        self.schedule.validate_but_dry_run(&self.plan)?;
        Ok(())
    }

    /// Refuses a run of every rank that would process more than the engine's event bound.
    fn check_events(&self) -> Result<(), PredictError> {
        let events = self.schedule.total_ops();
        let limit = crate::limits::SIMULATED_EVENTS;
        if events > limit {
            return Err(SimError::WorkTooLarge {
                events,
                ranks: self.schedule.world(),
                limit,
            }
            .into());
        }
        Ok(())
    }

    pub fn simulate(&self, opts: &SimOptions) -> Result<SimResult, PredictError> {
        Ok(simulate_on(
            &self.plan,
            &self.schedule,
            &self.cost,
            self.network.as_ref(),
            opts,
        )?)
    }
}

#[derive(Clone, Debug, Default)]
pub struct PredictOptions {
    /// Record trace events (for `--trace`).
    pub trace: bool,
    /// With `trace`: the ranks the trace holds (ascending; [`SimOptions::trace_ranks`]);
    /// `None`: every simulated rank.
    pub trace_ranks: Option<Vec<u32>>,
    /// Zero wall-clock fields so that output is byte-identical across runs.
    pub reproducible: bool,
    /// Simulate one representative rank per pipeline stage when that is exact (see
    /// [`SimOptions::collapse`]).
    pub collapse: bool,
    /// Skip the schedule validator (its dry run costs about as much as a collapsed
    /// simulation). Sweeps use this: the generators are property-tested to emit valid
    /// schedules, and the engine still reports deadlocks and mismatched transfers.
    pub skip_validation: bool,
}

pub struct Prediction {
    pub staged: Staged,
    pub result: SimResult,
    pub report: Report,
}

impl Prediction {
    /// The Chrome/Perfetto trace, when one was recorded.
    pub fn trace_json(&self) -> Option<String> {
        let trace = self.result.trace.as_ref()?;
        Some(trace.to_chrome_json(&self.staged.plan, &self.staged.schedule))
    }
}

/// The engine options [`predict_with`] simulates with (also used to re-simulate a staged
/// scenario, e.g. for the profile-uncertainty interval).
pub fn sim_options(scenario: &Scenario, opts: &PredictOptions) -> SimOptions {
    SimOptions {
        trace: opts.trace,
        trace_ranks: opts.trace_ranks.clone(),
        memory_capacity_bytes: scenario.cluster.gpu.usable_bytes(),
        collapse: opts.collapse,
        ..SimOptions::default()
    }
}

/// Simulated steps of a prediction whose profile has the machine's interruptions
/// (`host_model::jitter`): each meets its own draws, and the median one is the prediction.
pub const INTERRUPTED_RUNS: u64 = 15;

/// [`INTERRUPTED_RUNS`] steps with interruptions (seeds 1..=N, every rank simulated): the
/// median step's result, and how the steps spread.
fn median_interrupted(
    staged: &Staged,
    scenario: &Scenario,
    opts: &PredictOptions,
) -> Result<(SimResult, Option<InterruptedSteps>), PredictError> {
    let base = SimOptions {
        collapse: false,
        ..sim_options(scenario, opts)
    };
    let undisturbed = staged.simulate(&SimOptions {
        trace: false,
        ..base.clone()
    })?;
    let mut runs = Vec::with_capacity(INTERRUPTED_RUNS as usize);
    for seed in 1..=INTERRUPTED_RUNS {
        let r = staged.simulate(&SimOptions {
            trace: false,
            jitter_seed: Some(seed),
            ..base.clone()
        })?;
        runs.push((r.step_time_ns, seed, r));
    }
    runs.sort_unstable_by_key(|r| (r.0, r.1));
    let steps: Vec<u64> = runs.iter().map(|r| r.0).collect();
    let q = |f: f64| {
        let i = ((steps.len() as f64 - 1.0) * f).round() as usize;
        steps.get(i).copied().unwrap_or(0)
    };
    let (_, median_seed, median) = runs.swap_remove(runs.len() / 2);
    // The median run again only when a trace is wanted (the runs above record none).
    let result = if base.trace {
        staged.simulate(&SimOptions {
            jitter_seed: Some(median_seed),
            ..base
        })?
    } else {
        median
    };
    let s = |ns: u64| ns as f64 * 1e-9;
    Ok((
        result,
        Some(InterruptedSteps {
            runs: INTERRUPTED_RUNS as u32,
            undisturbed_step_time_s: s(undisturbed.step_time_ns),
            step_time_p10_s: s(q(0.1)),
            step_time_p90_s: s(q(0.9)),
        }),
    ))
}

/// Predict one training step of `scenario`: plan, generate, validate, simulate, report.
pub fn predict(scenario: &Scenario, opts: &PredictOptions) -> Result<Prediction, PredictError> {
    predict_with(scenario, opts, None)
}

/// [`predict`] with the cost model of a hardware profile instead of the defaults.
pub fn predict_with(
    scenario: &Scenario,
    opts: &PredictOptions,
    profile: Option<&Profile>,
) -> Result<Prediction, PredictError> {
    let start = Instant::now();
    let staged = Staged::with_profile(scenario, profile)?;
    // One run of every rank (no interruptions to repeat it): the engine runs what the
    // validator's dry run would (every rank, stream order, deps, every transfer and
    // collective matched as it runs), so the dry run is left out before it and done only
    // when the run fails, for the validator's error where it has one. A run that succeeds
    // is one the dry run would have passed.
    let engine_proves = !opts.collapse && staged.cost.interruptions.is_none();
    if !opts.skip_validation {
        // A collapsed run simulates representatives, which the programs' own checks and the
        // engine's collapse cover.
        if opts.collapse && staged.cost.interruptions.is_none() {
            staged.validate_programs()?;
        } else if engine_proves {
            staged.validate_but_dry_run()?;
        } else {
            staged.validate()?;
        }
    }
    let (result, interruptions) = match staged.cost.interruptions {
        Some(_) => median_interrupted(&staged, scenario, opts)?,
        None => match staged.simulate(&sim_options(scenario, opts)) {
            Ok(r) => (r, None),
            Err(e) => {
                if engine_proves && !opts.skip_validation {
                    staged.validate()?;
                }
                return Err(e);
            }
        },
    };
    let wall_s = if opts.reproducible {
        0.0
    } else {
        start.elapsed().as_secs_f64()
    };
    let mut report = Report::build(
        &staged.scenario,
        &staged.plan,
        &staged.schedule,
        &result,
        wall_s,
    );
    report.interruptions = interruptions;
    // What priced the step, when it is not what the user gave: after the choices made for
    // the user, before the known biases.
    let pricing = match profile {
        None => crate::profile::bundled::note(&scenario.cluster),
        Some(p) => crate::profile::bundled::applied_note(&scenario.cluster, p),
    };
    if let Some(note) = pricing {
        let biases = crate::known_bias::of(scenario).len();
        let at = report.notes.len().saturating_sub(biases);
        report.notes.insert(at, note);
    }
    Ok(Prediction {
        staged,
        result,
        report,
    })
}

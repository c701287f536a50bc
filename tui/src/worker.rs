//! Re-simulation off the UI thread. A [`Request`] (the what-if overrides) goes in, a
//! [`crate::Msg::Simulated`] comes back; when requests pile up while one is running, only the
//! newest is simulated (a newer request supersedes an older one), so holding a key down never
//! queues a backlog. [`compute`] is the work itself, callable directly (tests, first frame).

use crate::timeline::Timeline;
use crate::update::Msg;
use std::sync::mpsc::{Receiver, Sender};
use twin_sim::faults::{HorizonReport, JobFacts};
use twin_sim::profile::bundled::Pricing;
use twin_sim::report::Report;
use twin_sim::scenario::{FaultConfig, Scenario};
use twin_sim::schedule::Schedule;
use twin_sim::setup::ParsedSource;
use twin_sim::{predict_with, PredictOptions};

/// What every simulation of this session shares.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The scenario file, parsed once.
    pub source: ParsedSource,
    /// `--set` overrides from the command line; what-if overrides are applied after them.
    pub base_overrides: Vec<String>,
    /// What prices each simulation (the scenario's machine decides under `Machine`).
    pub pricing: Pricing,
    /// Simulate one representative rank per stage when exact (off when comparing with a
    /// measured trace, whose ranks must all be there).
    pub collapse: bool,
}

/// One re-simulation: overrides on top of [`Setup::base_overrides`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Increases with every request; a result is applied only if it answers the newest.
    pub id: u64,
    pub overrides: Vec<String>,
}

/// A simulated step and everything the panes show of it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub scenario: Scenario,
    pub report: Report,
    pub step_time_ns: u64,
    pub schedule: Schedule,
    pub timeline: Timeline,
    /// Only one rank per stage was simulated.
    pub collapsed: bool,
    pub pp: u32,
    /// The long-horizon fault simulation: `None` while it is still running (or when the
    /// scenario has no `[faults]`, see [`Outcome::faults`]).
    pub horizon: Option<Result<HorizonReport, String>>,
    /// The scenario's `[faults]` and the facts of this step that its horizon needs.
    pub faults: Option<(FaultConfig, JobFacts)>,
}

/// [`compute_step`] and then, when the scenario has `[faults]`, its horizon.
pub fn compute(setup: &Setup, overrides: &[String]) -> Result<Outcome, String> {
    let mut out = compute_step(setup, overrides)?;
    out.horizon = out.faults.as_ref().map(|(c, j)| horizon(c, j));
    Ok(out)
}

/// Resolves the scenario with `overrides` and predicts one step with a trace (skipping the
/// schedule validator: the generators are property-tested and the engine still reports
/// deadlocks). The `[faults]` horizon is left to [`horizon`]. Errors come back as the message
/// to show (the scenario validator's names the key and the allowed values).
pub fn compute_step(setup: &Setup, overrides: &[String]) -> Result<Outcome, String> {
    let all: Vec<String> = setup
        .base_overrides
        .iter()
        .chain(overrides)
        .cloned()
        .collect();
    let (scenario, _, faults) = setup
        .source
        .resolve_with_faults(&all)
        .map_err(|e| e.to_string())?;
    let opts = PredictOptions {
        trace: true,
        reproducible: true,
        collapse: setup.collapse,
        skip_validation: true,
        trace_ranks: None,
    };
    let profile = setup
        .pricing
        .profile_for(&scenario)
        .map_err(|e| e.to_string())?;
    let prediction =
        predict_with(&scenario, &opts, profile.as_deref()).map_err(|e| e.to_string())?;
    let plan = &prediction.staged.plan;
    let timeline = match &prediction.result.trace {
        Some(trace) => Timeline::from_trace(trace, &prediction.staged.schedule, |r| {
            if r < plan.world {
                plan.stage_of(r)
            } else {
                0
            }
        }),
        None => Timeline::default(),
    };
    let faults = faults.map(|config| {
        let job = JobFacts::from_scenario(
            &prediction.staged.scenario,
            plan,
            prediction.result.step_time_ns,
            prediction.report.exposed_comm_fraction,
        );
        (config, job)
    });
    let twin_sim::Prediction {
        staged,
        result,
        report,
    } = prediction;
    Ok(Outcome {
        pp: staged.plan.pp(),
        scenario: staged.scenario,
        report,
        step_time_ns: result.step_time_ns,
        schedule: staged.schedule,
        timeline,
        collapsed: result.collapsed,
        horizon: None,
        faults,
    })
}

/// The Monte Carlo horizon of a scenario's `[faults]` for a predicted step.
pub fn horizon(config: &FaultConfig, job: &JobFacts) -> Result<HorizonReport, String> {
    twin_sim::faults::simulate_horizon(config, job, None).map_err(|e| e.to_string())
}

/// The background thread. Dropping it closes the request channel; the thread ends after the
/// simulation it is running, if any (it is not joined, so quitting never waits for it).
pub struct Worker {
    requests: Sender<Request>,
}

impl Worker {
    /// Starts the thread; results are sent to `results` as [`Msg::Simulated`].
    pub fn spawn(setup: Setup, results: Sender<Msg>) -> std::io::Result<Worker> {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("twin-tui-sim".into())
            .spawn(move || serve(&setup, &rx, &results))?;
        Ok(Worker { requests: tx })
    }

    /// Queues a request; `false` when the worker has stopped.
    pub fn request(&self, r: Request) -> bool {
        self.requests.send(r).is_ok()
    }
}

/// Serves requests until the channel closes, always answering the newest one queued: first
/// the step (fast), then, unless a newer request is already waiting, the faults horizon.
fn serve(setup: &Setup, rx: &Receiver<Request>, results: &Sender<Msg>) {
    let mut queued: Option<Request> = None;
    loop {
        let first = match queued.take() {
            Some(r) => r,
            None => match rx.recv() {
                Ok(r) => r,
                Err(_) => return,
            },
        };
        let newest = latest(first, rx);
        let result = compute_step(setup, &newest.overrides);
        let faults = result.as_ref().ok().and_then(|o| o.faults.clone());
        let msg = Msg::Simulated {
            id: newest.id,
            result: Box::new(result),
        };
        if results.send(msg).is_err() {
            return;
        }
        if let Some((config, job)) = faults {
            if let Ok(r) = rx.try_recv() {
                queued = Some(r); // superseded: skip this horizon
                continue;
            }
            let msg = Msg::Horizon {
                id: newest.id,
                result: Box::new(horizon(&config, &job)),
            };
            if results.send(msg).is_err() {
                return;
            }
        }
    }
}

/// `first`, or the last request already queued behind it.
pub fn latest(first: Request, rx: &Receiver<Request>) -> Request {
    let mut newest = first;
    while let Ok(next) = rx.try_recv() {
        newest = next;
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_are_superseded_by_the_newest() {
        let (tx, rx) = std::sync::mpsc::channel();
        for id in 2..=4 {
            tx.send(Request {
                id,
                overrides: vec![],
            })
            .unwrap();
        }
        let first = Request {
            id: 1,
            overrides: vec![],
        };
        assert_eq!(latest(first, &rx).id, 4);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn the_worker_answers_with_the_request_id() {
        let source = twin_sim::setup::ParsedSource::parse(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../scenarios/small.toml"
            ))
            .unwrap(),
            "small.toml",
        )
        .unwrap();
        let setup = Setup {
            source,
            base_overrides: vec![],
            pricing: Pricing::Machine,
            collapse: true,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = Worker::spawn(setup, tx).unwrap();
        assert!(worker.request(Request {
            id: 7,
            overrides: vec!["parallel.tp=3".into()],
        }));
        match rx.recv().unwrap() {
            Msg::Simulated { id, result } => {
                assert_eq!(id, 7);
                let err = result.err().expect("tp=3 must be rejected");
                assert!(err.contains("tp"), "{err}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_step_comes_first_and_the_faults_horizon_after() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/512xA100-faults.toml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let setup = Setup {
            source: ParsedSource::parse(&text, "512xA100-faults.toml").unwrap(),
            base_overrides: vec!["faults.seeds=2".into(), "faults.horizon=\"1d\"".into()],
            pricing: Pricing::Machine,
            collapse: true,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = Worker::spawn(setup, tx).unwrap();
        assert!(worker.request(Request {
            id: 3,
            overrides: vec![],
        }));
        match rx.recv().unwrap() {
            Msg::Simulated { id: 3, result } => {
                let out = result.unwrap();
                assert!(out.horizon.is_none() && out.faults.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        match rx.recv().unwrap() {
            Msg::Horizon { id: 3, result } => assert_eq!(result.unwrap().seeds, 2),
            other => panic!("unexpected {other:?}"),
        }
    }
}

//! Test fixtures of this crate: a scenario planned and its schedule generated, what the
//! runtime is handed to execute. Built from the shared vocabulary only (plan and schedule
//! generation), as the runtime itself is.

use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{generate, Schedule};

/// A scenario's plan and its generated (not validated) schedule.
pub(crate) struct Planned {
    pub plan: Plan,
    pub schedule: Schedule,
}

/// Plan `scenario` and generate its schedule; panics on a scenario the generators refuse
/// (test fixtures only).
pub(crate) fn planned(scenario: &Scenario) -> Planned {
    let plan = Plan::new(scenario).expect("the fixture scenario plans");
    let schedule = generate(scenario, &plan).expect("the fixture scenario generates");
    Planned { plan, schedule }
}

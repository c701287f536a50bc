//! Schedules: the IR ([`ir`]), the generators that build it from a plan, and the validator
//! that proves a schedule can run. The generators are pure functions of (scenario, plan).

mod ir;
pub use ir::*;

use crate::plan::Plan;
use crate::scenario::Scenario;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    #[error("{0}")]
    Unsupported(String),
}

/// Build the step schedule for a validated scenario and its plan.
pub fn generate(_scenario: &Scenario, _plan: &Plan) -> Result<Schedule, ScheduleError> {
    Err(ScheduleError::Unsupported(
        "generators not written yet".into(),
    ))
}

//! Helpers shared by the schedule test files.
#![allow(dead_code)]

use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::*;

/// Plan and uniform-size schedule of step `step`.
pub fn generate_uniform(s: &Scenario, step: u64) -> (Plan, Result<Schedule, ScheduleError>) {
    let plan = Plan::new(s).expect("test scenarios are valid");
    let sizes = UniformSizes::new(s);
    let sched = generate_with(s, &plan, &sizes, step);
    (plan, sched)
}

/// A schedule that must generate and validate.
pub fn gen_ok(s: &Scenario, step: u64) -> Schedule {
    let (plan, sched) = generate_uniform(s, step);
    let sched = sched.unwrap();
    sched.validate(&plan).unwrap();
    sched
}

pub fn is_phase(op: &Op, phase: Phase) -> bool {
    matches!(&op.kind, OpKind::Compute(c) if c.phase == phase)
}

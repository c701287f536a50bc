//! What the probe examples share: rank 0's program of a scenario file, and one of its compute
//! ops. Each probe includes this file (`mod common;`).

pub mod arena;

use std::error::Error;
use twin_sim::schedule::{ComputeOp, OpKind, Program};

/// Rank 0's program of the scenario at `path`, as the simulator and the runtime plan it.
pub fn rank0_program(path: &str) -> Result<Program, Box<dyn Error>> {
    let s = twin_sim::setup::load(std::path::Path::new(path), &[])?;
    let plan = twin_sim::plan::Plan::new(&s)?;
    let schedule = twin_sim::schedule::generate(&s, &plan)?;
    let program = schedule
        .programs
        .into_iter()
        .next()
        .ok_or("the schedule has no program")?;
    Ok(program)
}

/// Compute op `which` (0-based, compute ops only) of `program`.
#[allow(dead_code)] // step_probe runs the whole program
pub fn compute_op(program: &Program, which: usize) -> Result<ComputeOp, Box<dyn Error>> {
    program
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) => Some(c.clone()),
            _ => None,
        })
        .nth(which)
        .ok_or_else(|| format!("rank 0 has no compute op {which}").into())
}

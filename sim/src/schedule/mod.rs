//! Schedules: the generators that build the IR ([`crate::ir`], re-exported here with its
//! validator) from a plan. The generators are pure functions of (scenario, plan):
//! [`pipeline`] orders each stage's passes (one file per schedule family), [`emit`] turns the
//! order into ops (with the data-parallel traffic that [`dp`] decides), and the IR's validator
//! ([`Schedule::validate`]) checks the result.
//!
//! One program is generated per pipeline stage and shared by every rank of that stage
//! (`program_of[rank] = stage`), so generation costs O(pp x ops per program), whatever the
//! data/tensor-parallel width. Under skewed MoE routing the ranks of a stage whose experts
//! carry different loads run different programs: one per (load class, stage)
//! ([`program_of`]).

mod bound;
mod builder;
mod chunks;
pub mod dp;
mod emit;
mod estimate;
pub mod partners;
pub mod pipeline;
mod sizes;

pub use crate::ir::*;
pub use bound::{step_lower_bounds, Bounds, PriceMemo, Prices};
pub use builder::{recycle, recycle_program};
pub use estimate::{estimate, WorkEstimate, OPS_PER_PROGRAM, OPS_PER_STEP};
pub use sizes::{Sizes, UniformSizes, WorkloadSizes};

use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::workload::routing::LoadClasses;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScheduleError {
    #[error("{0}")]
    Unsupported(String),
    #[error("schedule too large: {0}")]
    TooLarge(String),
}

/// Build the step schedule for a validated scenario and its plan, with sizes from
/// [`crate::workload`]. Under `sync = delayed:N` this is the step that synchronises (step
/// N - 1 of each window, see [`dp`]); use [`generate_step`] for the others. For every other
/// sync mode all steps are alike and this is step 0.
pub fn generate(scenario: &Scenario, plan: &Plan) -> Result<Schedule, ScheduleError> {
    generate_step(scenario, plan, representative_step(scenario))
}

/// Build the schedule of step `step` (0-based) of the run, with sizes from
/// [`crate::workload`]. Steps differ only under `sync = delayed:N`.
pub fn generate_step(
    scenario: &Scenario,
    plan: &Plan,
    step: u64,
) -> Result<Schedule, ScheduleError> {
    let sizes = WorkloadSizes { scenario, plan };
    generate_with(scenario, plan, &sizes, step)
}

/// The step [`generate`] builds: the synchronising one.
pub fn representative_step(scenario: &Scenario) -> u64 {
    match scenario.training.sync {
        crate::scenario::SyncMode::Delayed(n) => u64::from(n.max(1)) - 1,
        _ => 0,
    }
}

/// Build the schedule of step `step` with sizes from any provider.
pub fn generate_with(
    scenario: &Scenario,
    plan: &Plan,
    sizes: &dyn Sizes,
    step: u64,
) -> Result<Schedule, ScheduleError> {
    let mut programs = Vec::with_capacity(program_count(scenario, plan));
    generate_each(scenario, plan, sizes, step, |program| {
        programs.push(program);
        Ok::<(), ScheduleError>(())
    })?;
    Ok(Schedule {
        programs,
        program_of: program_of(scenario, plan),
    })
}

/// The rank-to-program map of every generated schedule: one program per pipeline stage and
/// routing load class (`workload::routing::LoadClasses`), class-major, so that without
/// routing skew `program_of[rank]` is the rank's stage and with it `programs[stage]` is the
/// stage's representative's.
pub fn program_of(scenario: &Scenario, plan: &Plan) -> Vec<u32> {
    let classes = LoadClasses::new(scenario);
    let pp = plan.pp();
    (0..plan.world)
        .map(|r| classes.class_of(plan, r) * pp + plan.stage_of(r))
        .collect()
}

/// How many programs [`generate`] builds: pp times the routing load classes.
pub fn program_count(scenario: &Scenario, plan: &Plan) -> usize {
    plan.pp() as usize * LoadClasses::new(scenario).len().max(1)
}

/// [`generate_with`]'s programs, handed to `each` one at a time in program order (stage 0
/// first) instead of collected; stops at the first error, `each`'s or generation's.
pub fn generate_each<E: From<ScheduleError>>(
    scenario: &Scenario,
    plan: &Plan,
    sizes: &dyn Sizes,
    step: u64,
    mut each: impl FnMut(Program) -> Result<(), E>,
) -> Result<(), E> {
    let pp = plan.pp();
    let vpp = plan.vpp();
    let m = plan.microbatches;
    if plan.chunks.len() != pp as usize || plan.chunks.iter().any(|r| r.len() != vpp as usize) {
        return Err(
            ScheduleError::Unsupported("plan layout does not have pp x vpp chunks".into()).into(),
        );
    }
    emit::check_tags(m, pp, vpp)?;
    let policy = dp::DpPolicy::new(scenario, plan, step)?;
    let overlap_buckets = bound::overlap_buckets(&policy);
    let orders = (0..pp)
        .map(|stage| {
            let extra_warmup = u32::from(scenario.training.moe_a2a_overlap);
            pipeline::stage_order(
                scenario.parallel.schedule,
                stage,
                (pp, vpp, m),
                extra_warmup,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for load in LoadClasses::new(scenario).loads {
        let chunk_plans =
            chunks::plan_chunks(scenario, plan, sizes, load, &policy, overlap_buckets);
        let ctx = emit::StageCtx {
            s: scenario,
            plan,
            sizes,
            dp: &policy,
            chunks: &chunk_plans,
            overlap_buckets,
        };
        for (stage, order) in (0..pp).zip(&orders) {
            each(emit::emit_stage(&ctx, stage, order)?)?;
        }
    }
    Ok(())
}

//! The work bound: a scenario whose schedule would hold more ops than
//! [`limits::SCHEDULE_OPS`] is refused when it is set up, naming the keys that make it large
//! and what to change, instead of being accepted and then exhausting memory or running for
//! minutes while its programs are built.

use crate::limits;
use crate::plan::Plan;
use crate::scenario::{Checker, Granularity, Scenario, ScenarioError};
use crate::schedule::{estimate, OPS_PER_STEP};

/// Fails when the schedule `plan` implies exceeds the op bound.
pub(crate) fn check(c: &Checker<'_>, s: &Scenario, plan: &Plan) -> Result<(), ScenarioError> {
    let limit_ops = limits::SCHEDULE_OPS;
    let work = estimate(s, plan);
    if work.total_ops <= limit_ops {
        return Ok(());
    }
    let m = plan.microbatches;
    let t = &s.training;
    let p = &s.parallel;
    let granularity = match s.run.granularity {
        Granularity::Chunk => "chunk",
        Granularity::Layer => "layer",
    };
    // The keys in the order of blame when none was overridden: the micro-batch count when it
    // dominates, else the layers per stage.
    let mut keys = vec![
        ("training.global_batch", t.global_batch.to_string()),
        ("training.micro_batch", t.micro_batch.to_string()),
        ("parallel.dp", p.dp.to_string()),
    ];
    let layer_keys = [
        ("model.layers", s.model.layers.to_string()),
        ("run.granularity", format!("\"{granularity}\"")),
        ("parallel.pp", p.pp.to_string()),
    ];
    if u64::from(m) >= work.steps_per_microbatch {
        keys.extend(layer_keys);
    } else {
        keys.splice(0..0, layer_keys);
    }
    let mut advice = vec![format!(
        "fewer micro batches per pipeline (global_batch / (micro_batch * dp) = {} / ({} * {}) \
         = {m}): a larger training.micro_batch or a smaller training.global_batch",
        t.global_batch, t.micro_batch, p.dp
    )];
    if s.run.granularity == Granularity::Layer {
        advice.push("run.granularity = \"chunk\" (one op per chunk instead of per layer)".into());
    }
    advice.push("fewer layers per stage (model.layers / parallel.pp)".into());
    Err(c.fail(
        &keys,
        format!(
            "the step's schedule would hold about {} ops ({m} micro batches per pipeline x {} \
             compute steps each on the busiest of {} stages, up to {} ops per step), over the \
             limit of {} ops that keeps a simulation in about 1 GiB of memory",
            work.total_ops,
            work.steps_per_microbatch,
            plan.pp(),
            OPS_PER_STEP,
            limit_ops
        ),
        format!("at most {limit_ops} ops: {}", advice.join("; or ")),
    ))
}

//! How many ops a schedule will hold, worked out from the plan before anything is generated:
//! a scenario with a million micro batches or sixty thousand layers per stage would otherwise
//! be accepted and then exhaust memory or run for minutes while its programs are built. The
//! count is exact in compute steps (micro batches x segments x passes per chunk) and bounds
//! the ops with [`OPS_PER_STEP`], the per-step allowance the emitter also reserves with.

use crate::plan::Plan;
use crate::scenario::{Granularity, PipelineSchedule, Recompute, Scenario};

/// Ops one compute step brings at most: the compute op itself, its allocations and frees
/// (activation, allocator slack, buffers), its collectives and the pipeline transfers
/// around it.
pub const OPS_PER_STEP: u64 = 12;

/// Ops of a program that do not scale with its steps: the model state's allocations, the
/// data-parallel start and the optimizer.
pub const OPS_PER_PROGRAM: u64 = 64;

/// The work a scenario's schedule implies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkEstimate {
    /// Compute steps of the busiest stage's program.
    pub stage_steps: u64,
    /// Compute steps per micro batch on the busiest stage (every pass of every segment).
    pub steps_per_microbatch: u64,
    /// Ops of the busiest stage's program, at most.
    pub stage_ops: u64,
    /// Ops of all programs together (one per pipeline stage), at most: what generating the
    /// schedule builds.
    pub total_ops: u64,
}

/// Ops a program of `steps` compute steps holds at most.
pub(crate) fn ops_for_steps(steps: u64) -> u64 {
    steps
        .saturating_mul(OPS_PER_STEP)
        .saturating_add(OPS_PER_PROGRAM)
}

/// Estimates the schedule [`super::generate`] would build for `scenario` and `plan`, in time
/// proportional to the number of chunks.
pub fn estimate(scenario: &Scenario, plan: &Plan) -> WorkEstimate {
    let m = u64::from(plan.microbatches);
    // Passes of one segment per micro batch: forward and backward, the recompute before the
    // backward, and the separate weight gradient of zero-bubble (and of some of DualPipe's).
    let passes = 2
        + u64::from(scenario.training.recompute != Recompute::None)
        + u64::from(matches!(
            scenario.parallel.schedule,
            PipelineSchedule::ZeroBubble | PipelineSchedule::DualPipe
        ));
    let mut busiest = (0u64, 0u64);
    let mut total_ops = 0u64;
    for chunks in &plan.chunks {
        let mut per_mb = 0u64;
        // The pass that finalises a chunk's gradients may be cut into gradient buckets once
        // per step: at most one more segment per layer.
        let mut once = 0u64;
        for c in chunks {
            let layers = u64::from(c.num_layers.max(1));
            let segs = match scenario.run.granularity {
                Granularity::Chunk => {
                    once += layers;
                    1
                }
                Granularity::Layer => layers,
            };
            per_mb = per_mb.saturating_add(segs.saturating_mul(passes));
        }
        // Under DualPipe each of a stage's two chunks carries half of the micro batches.
        let per_chunk = if scenario.parallel.schedule == PipelineSchedule::DualPipe {
            m.div_ceil(2)
        } else {
            m
        };
        let steps = per_mb.saturating_mul(per_chunk).saturating_add(once);
        total_ops = total_ops.saturating_add(ops_for_steps(steps));
        if steps > busiest.0 {
            busiest = (steps, per_mb);
        }
    }
    WorkEstimate {
        stage_steps: busiest.0,
        steps_per_microbatch: busiest.1,
        stage_ops: ops_for_steps(busiest.0),
        total_ops,
    }
}

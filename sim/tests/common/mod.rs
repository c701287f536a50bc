//! Helpers shared by the schedule and simulation test files.
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

/// A program's compute ops of `phase`, in program order.
pub fn computes(p: &Program, phase: Phase) -> Vec<&ComputeOp> {
    p.ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) if c.phase == phase => Some(c),
            _ => None,
        })
        .collect()
}

/// Compute costs 1 ns per 1,000 FLOPs of model passes; each pipeline transfer takes
/// `p2p_ns`; everything else is free. The engine oracles' cost model.
pub struct FlopsCost {
    pub p2p_ns: u64,
}

impl twin_sim::cost::CostModel for FlopsCost {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        match op.phase {
            Phase::Optimizer | Phase::Compress | Phase::Copy => 0,
            _ => op.flops / 1_000,
        }
    }
    fn collective_ns(&self, _: CollectiveKind, _: &twin_sim::plan::Group, _: u64, _: u32) -> u64 {
        0
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, _: u64) -> u64 {
        self.p2p_ns
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, _: twin_sim::cost::HostWork) -> u64 {
        0
    }
}

/// A pipeline-only scenario with a negligible head (tiny vocab) so stages are uniform, no
/// recompute.
pub fn pipeline(
    pp: u32,
    m: u64,
    schedule: twin_sim::scenario::PipelineSchedule,
    vpp: u32,
) -> Scenario {
    let mut s = twin_sim::testing::small_scenario(1, pp, 1, m);
    s.model.layers = 4 * pp * vpp;
    s.model.vocab = 8;
    s.parallel.schedule = schedule;
    s.parallel.vpp = vpp;
    s.training.recompute = twin_sim::scenario::Recompute::None;
    s
}

/// Compute costs 1 ns per 1,000 FLOPs of model passes; an expert-parallel all-to-all costs
/// `a2a_ns_per_kb` ns per 1,000 bytes; everything else is free. The MoE engine oracles' cost
/// model, the same on every rank.
pub struct ExpertCost {
    pub a2a_ns_per_kb: u64,
}

impl twin_sim::cost::CostModel for ExpertCost {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        match op.phase {
            Phase::Optimizer | Phase::Compress | Phase::Copy => 0,
            _ => op.flops / 1_000,
        }
    }
    fn collective_ns(
        &self,
        kind: CollectiveKind,
        g: &twin_sim::plan::Group,
        bytes: u64,
        _calls: u32,
    ) -> u64 {
        match (kind, g.kind) {
            (CollectiveKind::AllToAll, twin_sim::plan::GroupKind::Ep) => {
                bytes / 1_000 * self.a2a_ns_per_kb
            }
            _ => 0,
        }
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, _: u64) -> u64 {
        0
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, _: twin_sim::cost::HostWork) -> u64 {
        0
    }
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
}

/// Simulates `s` collapsed and with every rank, after validating its schedule, and returns
/// the step time (the two must agree).
pub fn step_collapsed_as_in_full(s: &Scenario) -> u64 {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let cost = twin_sim::cost::Analytic::new(s);
    let full = twin_sim::engine::simulate(
        &plan,
        &sched,
        &cost,
        &twin_sim::engine::SimOptions {
            collapse: false,
            ..Default::default()
        },
    )
    .unwrap();
    let collapsed = twin_sim::engine::simulate(&plan, &sched, &cost, &Default::default()).unwrap();
    assert!(full.step_time_ns > 0);
    assert_eq!(collapsed.step_time_ns, full.step_time_ns);
    full.step_time_ns
}

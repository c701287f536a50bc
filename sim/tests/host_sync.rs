//! The host synchronisation of a dropless MoE layer's dispatch: its forward (and a
//! recompute of it) waits on the host for the GPU before issuing the layer's experts, so an
//! eager host with time per kernel cannot run ahead across MoE layers. A capacity-padded
//! layer knows its sizes up front and does not wait.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::Plan;
use twin_sim::scenario::{Moe, MoeRouting, Recompute, Scenario};
use twin_sim::schedule::{generate, ComputeOp, OpKind, Phase, Schedule};

mod common;

const LAYERS: u32 = 4;

/// Two GPUs, one stage, one micro batch: every layer MoE with two experts, one per rank.
fn moe(routing: MoeRouting) -> Scenario {
    let mut s = twin_sim::testing::small_scenario(1, 1, 2, 1);
    s.model.layers = LAYERS;
    s.model.vocab = 8;
    s.model.moe = Some(Moe::uniform(2, 1, 1, 4096));
    s.parallel.ep = 2;
    s.training.moe_routing = routing;
    s
}

fn schedule(s: &Scenario) -> (Plan, Schedule) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    (plan, sched)
}

/// The compute ops of rank 0's program in `phase`.
fn computes(sched: &Schedule, phase: Phase) -> Vec<&ComputeOp> {
    common::computes(&sched.programs[0], phase)
}

#[test]
fn dropless_layers_synchronise_in_the_forward_and_its_recompute_only() {
    for routing in [
        MoeRouting::Balanced,
        MoeRouting::ForceBalanced,
        MoeRouting::Imbalance { max_load: 1.5 },
    ] {
        let mut s = moe(routing.clone());
        s.training.recompute = Recompute::Full;
        let (_, sched) = schedule(&s);
        let fwd = computes(&sched, Phase::Forward);
        assert_eq!(fwd.len(), 1, "{routing:?}");
        let f = &fwd[0];
        assert_eq!(f.host_syncs.count, LAYERS, "{routing:?}: one per MoE layer");
        // The experts, permutations and the rest of each layer come after its dispatch; the
        // attention and the router before it.
        assert!(
            f.host_syncs.tail_kernels > 0 && f.host_syncs.tail_kernels < f.kernels,
            "{routing:?}: {f:?}"
        );
        let again = computes(&sched, Phase::Recompute);
        assert_eq!(again.len(), 1);
        assert_eq!(
            again[0].host_syncs, f.host_syncs,
            "the recompute runs the forward again"
        );
        for phase in [Phase::Backward, Phase::BackwardInput, Phase::BackwardWeight] {
            for c in computes(&sched, phase) {
                assert!(c.host_syncs.is_none(), "{routing:?} {phase:?}: {c:?}");
            }
        }
    }
    let (_, padded) = schedule(&moe(MoeRouting::Capacity { factor: 1.0 }));
    for c in computes(&padded, Phase::Forward) {
        assert!(c.host_syncs.is_none(), "capacity-padded: {c:?}");
    }
}

#[test]
fn selective_recompute_of_the_moe_block_synchronises_again() {
    let mut s = moe(MoeRouting::Balanced);
    s.training.recompute = Recompute::Selective;
    s.training.recompute_modules = Some(twin_sim::scenario::RecomputeModules {
        moe: true,
        ..twin_sim::scenario::RecomputeModules::ATTENTION_CORE
    });
    let (_, sched) = schedule(&s);
    let again = computes(&sched, Phase::Recompute);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].host_syncs.count, LAYERS);
    s.training.recompute_modules = Some(twin_sim::scenario::RecomputeModules::ATTENTION_CORE);
    let (_, sched) = schedule(&s);
    for c in computes(&sched, Phase::Recompute) {
        assert!(c.host_syncs.is_none(), "the attention core alone: {c:?}");
    }
}

/// [`common::ExpertCost`] with an eager host's time per kernel.
struct HostCost(u64);

impl CostModel for HostCost {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        COST.compute_ns(rank, op)
    }
    fn collective_ns(
        &self,
        kind: twin_sim::schedule::CollectiveKind,
        g: &twin_sim::plan::Group,
        bytes: u64,
        calls: u32,
    ) -> u64 {
        COST.collective_ns(kind, g, bytes, calls)
    }
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        COST.p2p_ns(plan, src, dst, bytes)
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        COST.checkpoint_ns(bytes)
    }
    fn host_ns(&self, work: twin_sim::cost::HostWork) -> u64 {
        COST.host_ns(work)
    }
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
    fn host_issue_ns(&self) -> u64 {
        self.0
    }
}

const COST: common::ExpertCost = common::ExpertCost { a2a_ns_per_kb: 1 };

fn step_ns(plan: &Plan, sched: &Schedule, host_ns: u64) -> u64 {
    simulate(plan, sched, &HostCost(host_ns), &SimOptions::default())
        .unwrap()
        .step_time_ns
}

/// The schedule with its synchronisations taken out.
fn unsynchronised(sched: &Schedule) -> Schedule {
    let mut out = sched.clone();
    for p in &mut out.programs {
        for o in &mut p.ops {
            if let OpKind::Compute(c) = &mut o.kind {
                c.host_syncs = Default::default();
            }
        }
    }
    out
}

#[test]
fn synchronisations_cost_only_where_the_host_has_time_per_kernel() {
    let (plan, sched) = schedule(&moe(MoeRouting::Balanced));
    let free = unsynchronised(&sched);
    assert_ne!(free, sched);
    // No host time: the host is never behind, and the synchronisations cost nothing.
    assert_eq!(step_ns(&plan, &sched, 0), step_ns(&plan, &free, 0));
    // A host slower per kernel than the layers' kernels run: each synchronisation leaves the
    // GPU waiting for the host to issue what follows it, which it would otherwise have issued
    // while the GPU ran the layers before.
    let host_ns = 50_000;
    let synced = step_ns(&plan, &sched, host_ns);
    let ahead = step_ns(&plan, &free, host_ns);
    assert!(synced > ahead, "{synced} vs {ahead}");
    // And the collapsed run agrees with the full one (the host clock is per rank).
    let collapsed = simulate(
        &plan,
        &sched,
        &HostCost(host_ns),
        &SimOptions {
            collapse: true,
            ..SimOptions::default()
        },
    )
    .unwrap()
    .step_time_ns;
    assert_eq!(collapsed, synced);
}

#[test]
fn only_moe_layers_synchronise_whichever_stage_holds_them() {
    // Eight layers over two stages: the first two dense, then every second layer MoE (the
    // 4th, 6th and 8th; `moe_every` counts from the first layer after the dense ones).
    let mut s = twin_sim::testing::small_scenario(1, 2, 2, 1);
    s.model.layers = 8;
    s.model.vocab = 8;
    let mut moe = Moe::uniform(2, 1, 2, 4096);
    moe.dense_layers = 2;
    moe.shared_experts = 1;
    s.model.moe = Some(moe);
    s.parallel.ep = 2;
    let moe_layers = s.model.moe_layers_in(0, 8);
    let (plan, sched) = schedule(&s);
    let mut synced = 0;
    for stage in 0..2u32 {
        let rank = (0..plan.world)
            .find(|&r| plan.stage_of(r) == stage)
            .unwrap();
        let program = sched.program(rank);
        for o in &program.ops {
            if let OpKind::Compute(c) = &o.kind {
                match c.phase {
                    Phase::Forward => synced += u64::from(c.host_syncs.count),
                    _ => assert!(c.host_syncs.is_none(), "{:?}", c.phase),
                }
            }
        }
    }
    // One micro batch per pipeline (small_scenario's), so each MoE layer's forward once.
    assert_eq!(synced, moe_layers);
    assert!(moe_layers > 0 && moe_layers < 8);
}

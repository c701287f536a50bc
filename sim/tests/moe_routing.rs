//! `[training] moe_routing` on the engine: a skewed router gives the busiest expert-parallel
//! rank larger expert GEMMs and every member of its group larger all-to-alls, and that rank
//! paces the step; a capacity factor pads every expert to the same size. Exact times under a
//! cost model where compute costs 1 ns per 1,000 FLOPs and an expert all-to-all 1 ns per
//! 1,000 bytes.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::{Moe, MoeRouting, Scenario};
use twin_sim::schedule::{generate, CollectiveKind, OpKind, Phase, Program, Schedule};

mod common;

/// The expert all-to-all costs 1 ns per 1,000 bytes.
const COST: common::ExpertCost = common::ExpertCost { a2a_ns_per_kb: 1 };

/// Sequence length, hidden and expert widths of the test model.
const S: u64 = 1024;
const H: u64 = 1024;
const F: u64 = 4096;
const LAYERS: u32 = 4;

/// Two GPUs, one stage, one micro batch of one sequence: every layer MoE with two experts of
/// width `F`, top 1, one expert per rank (`ep = 2`).
fn moe(routing: MoeRouting) -> Scenario {
    let mut s = twin_sim::testing::small_scenario(1, 1, 2, 1);
    s.model.layers = LAYERS;
    s.model.vocab = 8;
    s.model.moe = Some(Moe::uniform(2, 1, 1, F));
    s.parallel.ep = 2;
    s.training.moe_routing = routing;
    s
}

fn run(s: &Scenario, collapse: bool) -> (Plan, Schedule, SimResult) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let opts = SimOptions {
        collapse,
        ..SimOptions::default()
    };
    let res = simulate(&plan, &sched, &COST, &opts).unwrap();
    (plan, sched, res)
}

/// FLOPs of one pass's compute (the only one of its phase: one micro batch, one chunk).
fn pass_flops(p: &Program, phase: Phase) -> u64 {
    let ops = common::computes(p, phase);
    assert_eq!(ops.len(), 1, "one {phase:?} op");
    ops[0].flops
}

/// The expert all-to-alls of a program: (bytes, calls) of each.
fn all_to_alls(p: &Program) -> Vec<(u64, u32)> {
    p.ops
        .iter()
        .filter_map(|o| match o.kind {
            OpKind::Collective {
                kind: CollectiveKind::AllToAll,
                group: GroupKind::Ep,
                bytes,
                calls,
            } => Some((bytes, calls)),
            _ => None,
        })
        .collect()
}

/// The time the cost model gives a program's ops, serially: its compute and its expert
/// all-to-alls.
fn serial_ns(p: &Program) -> u64 {
    let compute: u64 = p
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) => Some(twin_sim::cost::CostModel::compute_ns(&COST, 0, c)),
            _ => None,
        })
        .sum();
    compute + all_to_alls(p).iter().map(|(b, _)| b / 1_000).sum::<u64>()
}

/// One routed expert's forward GEMM FLOPs per layer with `copies` token copies: up and down
/// projections of a GeLU MLP.
fn expert_flops(copies: u64) -> u64 {
    4 * copies * H * F
}

#[test]
fn an_imbalance_of_one_and_a_half_stretches_the_busiest_rank_and_paces_the_step() {
    let (_, bal_sched, bal) = run(&moe(MoeRouting::Balanced), false);
    let skew_s = moe(MoeRouting::Imbalance { max_load: 1.5 });
    let (plan, sched, skew) = run(&skew_s, false);
    assert_eq!(bal_sched.programs.len(), 1);
    assert_eq!(sched.programs.len(), 2, "a hot and a cold program");
    // The first rank of the expert-parallel group is the busiest.
    let ep = plan.group(plan.group_of(0, GroupKind::Ep));
    assert_eq!(ep.members, vec![0, 1]);
    let (hot, cold, even) = (sched.program(0), sched.program(1), &bal_sched.programs[0]);

    // Its expert GEMMs see 1.5x the mean share of S copies (top 1), the other rank the rest:
    // 0.5x. The backward is twice the forward.
    let layers = u64::from(LAYERS);
    let base = pass_flops(even, Phase::Forward);
    assert_eq!(
        pass_flops(hot, Phase::Forward),
        base + layers * (expert_flops(S * 3 / 2) - expert_flops(S))
    );
    assert_eq!(
        pass_flops(cold, Phase::Forward),
        base - layers * (expert_flops(S) - expert_flops(S / 2))
    );
    for p in [hot, cold] {
        assert_eq!(
            pass_flops(p, Phase::Backward),
            2 * pass_flops(p, Phase::Forward)
        );
    }

    // Every all-to-all of both ranks carries the busiest rank's 1.5x copies: S*3/2 tokens of H
    // bf16 elements, dispatch and combine in each pass, once per layer.
    let want: Vec<(u64, u32)> = all_to_alls(even)
        .iter()
        .map(|&(b, calls)| (b * 3 / 2, calls))
        .collect();
    assert_eq!(all_to_alls(even)[0], (S * H * 2, 2 * LAYERS));
    assert_eq!(all_to_alls(hot), want);
    assert_eq!(all_to_alls(cold), want);

    // The busiest rank runs serially and paces the step; the other waits at each all-to-all
    // for the difference of their compute.
    assert_eq!(bal.step_time_ns, serial_ns(even));
    assert_eq!(skew.step_time_ns, serial_ns(hot));
    assert!(skew.step_time_ns > bal.step_time_ns);
    for r in &skew.ranks {
        assert_eq!(r.finish_ns, skew.step_time_ns, "rank {}", r.rank);
    }
    assert_eq!(skew.ranks[0].idle_ns, 0);
    assert_eq!(skew.ranks[1].idle_ns, serial_ns(hot) - serial_ns(cold));

    // Collapsing is refused (the ranks of the stage differ) and gives the same answer.
    let (_, _, collapsed) = run(&skew_s, true);
    assert!(!collapsed.collapsed);
    assert_eq!(collapsed.step_time_ns, skew.step_time_ns);
}

#[test]
fn a_capacity_factor_pads_every_expert_to_the_same_size() {
    let (_, even_sched, _) = run(&moe(MoeRouting::Balanced), false);
    for factor in [0.5, 1.25] {
        let (_, sched, res) = run(&moe(MoeRouting::Capacity { factor }), true);
        assert_eq!(sched.programs.len(), 1, "one program for every rank");
        assert!(res.collapsed);
        let (p, even) = (&sched.programs[0], &even_sched.programs[0]);
        let copies = (S as f64 * factor) as u64;
        let base = pass_flops(even, Phase::Forward);
        assert_eq!(
            pass_flops(p, Phase::Forward),
            base + u64::from(LAYERS) * expert_flops(copies) - u64::from(LAYERS) * expert_flops(S),
            "factor {factor}"
        );
        assert_eq!(all_to_alls(p)[0].0, copies * H * 2, "factor {factor}");
        assert_eq!(res.step_time_ns, serial_ns(p));
    }
}

#[test]
fn per_expert_loads_place_experts_on_ranks_in_blocks() {
    // Four experts on two ranks: rank 0 holds experts 0-1 (loads 3 + 1), rank 1 experts 2-3
    // (1 + 1): rank loads 4/3 and 2/3 of the mean.
    let mut s = moe(MoeRouting::ExpertLoads(vec![3.0, 1.0, 1.0, 1.0]));
    s.model.moe = Some(Moe::uniform(4, 1, 1, F));
    let (_, sched, res) = run(&s, false);
    let mut even_s = s.clone();
    even_s.training.moe_routing = MoeRouting::Balanced;
    let (_, even_sched, _) = run(&even_s, false);
    let base = pass_flops(&even_sched.programs[0], Phase::Forward);
    let layers = u64::from(LAYERS);
    let hot = pass_flops(sched.program(0), Phase::Forward);
    let cold = pass_flops(sched.program(1), Phase::Forward);
    // ceil(1024 * 4/3) = 1366 copies on rank 0, ceil(1024 * 2/3) = 683 on rank 1, each rank's
    // two experts a GEMM of half of them (rounded up: 683 and 342 rows).
    assert_eq!(
        hot,
        base + layers * (2 * expert_flops(683) - expert_flops(S))
    );
    assert_eq!(
        cold,
        base - layers * (expert_flops(S) - 2 * expert_flops(342))
    );
    assert_eq!(res.step_time_ns, serial_ns(sched.program(0)));
}

#[test]
fn a_seeded_load_spread_is_reproducible_and_moves_with_the_seed() {
    let mut s = moe(MoeRouting::ExpertLoadCv { cv: 0.5 });
    s.model.moe = Some(Moe::uniform(16, 1, 1, F));
    let a = run(&s, false).2.step_time_ns;
    assert_eq!(a, run(&s, false).2.step_time_ns);
    let times: Vec<u64> = (2..6)
        .map(|seed| {
            s.run.seed = seed;
            run(&s, false).2.step_time_ns
        })
        .collect();
    assert!(times.iter().any(|&t| t != a), "{a} {times:?}");
}

//! The engine against closed forms. The closed forms are test oracles only: the engine must
//! reproduce them by simulating the generated schedule op by op, not by computing them.
//!
//! With free communication and uniform stages, GPipe and 1F1B idle every stage for
//! (p-1)(f+b) of a step of (m+p-1)(f+b), so the bubble fraction is (p-1)/(m+p-1); interleaving
//! over v chunks cuts the bubble time to (p-1)(f+b)/v, i.e. (p-1)/(v*m) of the ideal step.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proptest::prelude::*;
use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::Plan;
use twin_sim::scenario::{PipelineSchedule, Recompute, Scenario};
use twin_sim::schedule::{generate, CollectiveKind, OpKind, Stream};
use twin_sim::testing::small_scenario;

mod common;

use common::{pipeline, FlopsCost};

/// Compute costs 1 ns per 1,000 FLOPs of model passes; everything else is free.
const FREE_COMM: FlopsCost = FlopsCost { p2p_ns: 0 };

fn run(s: &Scenario, cost: &dyn CostModel) -> (Plan, SimResult) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let res = simulate(&plan, &sched, cost, &SimOptions::default()).unwrap();
    (plan, res)
}

fn assert_close(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs().max(1e-12),
        "{what}: got {got:.6}, want {want:.6} (±{:.2}%)",
        rel * 100.0
    );
}

#[test]
fn gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1() {
    for schedule in [PipelineSchedule::Gpipe, PipelineSchedule::OneFOneB] {
        for (p, m) in [(2u32, 4u64), (4, 8), (4, 32), (8, 16), (8, 64)] {
            let (_, res) = run(&pipeline(p, m, schedule, 1), &FREE_COMM);
            let want = f64::from(p - 1) / (m as f64 + f64::from(p) - 1.0);
            assert_close(
                res.bubble_fraction(),
                want,
                0.005,
                &format!("{schedule:?} p={p} m={m}"),
            );
            assert_eq!(res.exposed_comm_fraction(), 0.0);
        }
    }
}

#[test]
fn interleaving_divides_the_bubble_by_v() {
    for (p, v, m) in [(4u32, 2u32, 8u64), (4, 4, 16), (8, 2, 16), (2, 3, 8)] {
        let (_, res) = run(
            &pipeline(p, m, PipelineSchedule::Interleaved1F1B, v),
            &FREE_COMM,
        );
        // bubble time / ideal step = (p-1)/(v m); as a fraction of the whole step:
        let ratio = f64::from(p - 1) / (f64::from(v) * m as f64);
        let want = ratio / (1.0 + ratio);
        assert_close(
            res.bubble_fraction(),
            want,
            0.005,
            &format!("interleaved p={p} v={v} m={m}"),
        );
    }
}

#[test]
fn one_stage_has_no_bubble() {
    for schedule in [
        PipelineSchedule::Gpipe,
        PipelineSchedule::OneFOneB,
        PipelineSchedule::ZeroBubble,
    ] {
        let (_, res) = run(&pipeline(1, 8, schedule, 1), &FREE_COMM);
        assert_eq!(res.bubble_fraction(), 0.0, "{schedule:?}");
    }
}

#[test]
fn zero_bubble_beats_1f1b() {
    let (_, zb) = run(&pipeline(4, 8, PipelineSchedule::ZeroBubble, 1), &FREE_COMM);
    let (_, f1) = run(&pipeline(4, 8, PipelineSchedule::OneFOneB, 1), &FREE_COMM);
    assert!(
        zb.bubble_fraction() < 0.8 * f1.bubble_fraction(),
        "zb {} vs 1f1b {}",
        zb.bubble_fraction(),
        f1.bubble_fraction()
    );
    assert!(zb.step_time_ns < f1.step_time_ns);
}

#[test]
fn compute_exposed_comm_and_idle_partition_each_rank_step() {
    let mut s = small_scenario(2, 4, 2, 8);
    s.training.recompute = Recompute::Selective;
    let (_, res) = run(&s, &Analytic::new(&s));
    for r in &res.ranks {
        assert_eq!(
            r.compute_busy_ns + r.comm_exposed_ns + r.idle_ns,
            res.step_time_ns,
            "rank {}",
            r.rank
        );
    }
    assert!(
        res.exposed_comm_fraction() > 0.0,
        "tp and dp communication is not free in the analytic model"
    );
}

fn config() -> impl Strategy<Value = Scenario> {
    (
        prop::sample::select(vec![1u32, 2, 4]),
        prop::sample::select(vec![1u32, 2, 3, 4]),
        prop::sample::select(vec![1u32, 2, 4]),
        1u64..6,
        prop::sample::select(vec![
            PipelineSchedule::Gpipe,
            PipelineSchedule::OneFOneB,
            PipelineSchedule::ZeroBubble,
            PipelineSchedule::Interleaved1F1B,
        ]),
        0u8..4,
        prop::sample::select(vec![Recompute::None, Recompute::Selective, Recompute::Full]),
        any::<bool>(),
    )
        .prop_map(|(tp, pp, dp, k, schedule, zero, recompute, overlap)| {
            let interleaved = schedule == PipelineSchedule::Interleaved1F1B && pp >= 2;
            let m = if interleaved { k * u64::from(pp) } else { k };
            let mut s = small_scenario(tp, pp, dp, m);
            s.parallel.schedule = if schedule == PipelineSchedule::Interleaved1F1B && !interleaved {
                PipelineSchedule::OneFOneB
            } else {
                schedule
            };
            if interleaved {
                s.parallel.vpp = 2;
                s.model.layers = 4 * pp;
            }
            s.parallel.zero = zero;
            s.training.recompute = recompute;
            s.training.overlap_grad_reduce = overlap;
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Every generated schedule finishes without deadlock, and no rank's step is shorter than
    /// the work its busiest stream must do one op after another (a critical-path lower bound).
    #[test]
    fn step_time_is_at_least_each_streams_serial_work(s in config()) {
        let cost = Analytic::new(&s);
        let (plan, res) = run(&s, &cost);
        let sched = generate(&s, &plan).unwrap();
        prop_assert!(res.step_time_ns > 0);
        for rank in 0..plan.world {
            let prog = sched.program(rank);
            let compute: u64 = prog
                .ops
                .iter()
                .filter_map(|op| match &op.kind {
                    OpKind::Compute(c) if op.stream == Stream::Compute => Some(cost.compute_ns(rank, c)),
                    _ => None,
                })
                .sum();
            prop_assert!(res.step_time_ns >= compute, "rank {rank}: step {} < compute {compute}", res.step_time_ns);
        }
    }
}

/// HSDP on two nodes of 8 (tp 2, dp 8 in shard groups of 4): every reduce-scatter over the
/// shard group, inside a node, is followed by an all-reduce of its output over the replica
/// group, one rank in each node; each of those runs for exactly what the analytic cost model
/// charges for its bytes, calls and group.
#[test]
fn hsdp_replica_all_reduces_take_what_the_cost_model_charges() {
    use twin_sim::plan::GroupKind;
    let mut s = small_scenario(2, 1, 8, 2);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(4);
    let cost = Analytic::new(&s);
    let plan = Plan::new(&s).unwrap();
    let sched = generate(&s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let opts = SimOptions {
        trace: true,
        collapse: false,
        ..SimOptions::default()
    };
    let res = simulate(&plan, &sched, &cost, &opts).unwrap();
    let trace = res.trace.unwrap();
    let replica = plan.group(plan.group_of(0, GroupKind::DpReplica));
    assert_eq!((replica.members.clone(), replica.nodes), (vec![0, 8], 2));
    let shard = plan.group(plan.group_of(0, GroupKind::DenseDp));
    assert_eq!(shard.nodes, 1);
    let prog = &sched.programs[sched.program_of[0] as usize];
    let (mut replicas, mut scatters) = (0, 0);
    for ev in trace.events.iter().filter(|e| e.rank == 0) {
        let OpKind::Collective {
            kind,
            group,
            bytes,
            calls,
        } = prog.ops[ev.op as usize].kind
        else {
            continue;
        };
        match (kind, group) {
            (CollectiveKind::AllReduce, GroupKind::DpReplica) => {
                replicas += 1;
                assert_eq!(ev.stream, Stream::Dp);
                assert_eq!(
                    ev.end_ns - ev.start_ns,
                    cost.collective_ns(kind, replica, bytes, calls),
                    "op {}",
                    ev.op
                );
                assert!(ev.end_ns - ev.start_ns > 0);
            }
            (CollectiveKind::ReduceScatter, GroupKind::DenseDp) => scatters += 1,
            _ => {}
        }
    }
    assert!(replicas > 0);
    assert_eq!(replicas, scatters);
    // Simulating one representative per stage gives the same step.
    let opts = SimOptions {
        collapse: true,
        ..SimOptions::default()
    };
    let collapsed = simulate(&plan, &sched, &cost, &opts).unwrap();
    assert!(collapsed.collapsed);
    assert_eq!(collapsed.step_time_ns, res.step_time_ns);
}

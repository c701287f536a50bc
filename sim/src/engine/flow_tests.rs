//! The flow model in the engine: with no contention it reproduces the alpha-beta times;
//! transfers that share links slow each other; compute shares cores and is slowed by
//! overlapping communication.

use super::testkit::*;
use super::*;
use crate::cost::{Analytic, NvlsModel};
use crate::plan::{Group, GroupKind};
use crate::scenario::Scenario;
use crate::schedule::{CollectiveKind, ComputeOp, Peer, Program, Stream};
use crate::testing::small_scenario;
use crate::topology::Network;

/// Every rank runs `ops` collectives (stream, group kind, kind, bytes), all at once.
fn collectives(plan: &Plan, ops: &[(Stream, GroupKind, CollectiveKind, u64)]) -> Schedule {
    let progs: Vec<Program> = (0..plan.world)
        .map(|r| {
            let mut b = ProgBuilder::new(plan.stage_of(r));
            for &(stream, g, kind, bytes) in ops {
                b.collective(stream, kind, g, bytes, &[]);
            }
            b.build()
        })
        .collect();
    per_rank(progs)
}

fn run(s: &Scenario, cost: &Analytic, flow: bool, sched: impl Fn(&Plan) -> Schedule) -> u64 {
    let plan = Plan::new(s).unwrap();
    let schedule = sched(&plan);
    let net = Network::new(&s.cluster, &cost.links);
    simulate_on(
        &plan,
        &schedule,
        cost,
        flow.then_some(&net),
        &SimOptions::default(),
    )
    .unwrap()
    .step_time_ns
}

fn scenario(tp: u32, dp: u32, gpus_per_node: u32) -> Scenario {
    let mut s = small_scenario(tp, 1, dp, 1);
    s.cluster.gpus_per_node = gpus_per_node;
    s
}

#[test]
fn without_contention_flows_reproduce_alpha_beta() {
    use CollectiveKind::*;
    let kinds = [AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll];
    let sizes = [4 << 10, 1 << 20, 16 << 20, 1 << 30];
    let mut algorithms = std::collections::BTreeSet::new();
    // (tp, dp, gpus per node): in-node groups; one member per node; several members on each
    // of several nodes (hierarchical all-reduce, split all-to-all).
    for (tp, dp, gpn, kind_of_group) in [
        (8, 1, 8, GroupKind::Tp),
        (8, 4, 8, GroupKind::Dp),
        (1, 32, 8, GroupKind::Dp),
        (2, 16, 4, GroupKind::Dp),
    ] {
        for nvls in [false, true] {
            let s = scenario(tp, dp, gpn);
            let mut cost = Analytic::new(&s);
            if nvls {
                cost.links.nvls = Some(NvlsModel {
                    efficiency: 0.6,
                    min_bytes: 1 << 20,
                });
            }
            let plan = Plan::new(&s).unwrap();
            let g: &Group = plan.group(plan.group_of(0, kind_of_group));
            for kind in kinds {
                for bytes in sizes {
                    let op = [(Stream::Dp, kind_of_group, kind, bytes)];
                    let ab = run(&s, &cost, false, |p| collectives(p, &op));
                    let fl = run(&s, &cost, true, |p| collectives(p, &op));
                    let shape = crate::cost::GroupShape {
                        ranks: g.members.len() as u32,
                        nodes: g.nodes,
                        max_per_node: g.max_per_node,
                    };
                    algorithms.insert(format!(
                        "{:?}",
                        cost.links.estimate(kind, shape, bytes).algorithm
                    ));
                    // Rounding to whole ns per phase and for the latency: a few ns at most.
                    assert!(
                        ab.abs_diff(fl) <= 4,
                        "{kind:?} {bytes} B on {:?} ({tp},{dp},{gpn}) nvls {nvls}: alpha-beta {ab} flow {fl}",
                        g.members
                    );
                }
            }
        }
    }
    // The cases above exercise every algorithm.
    for a in ["Ring", "Tree", "Hierarchical", "Nvls", "Direct"] {
        assert!(algorithms.contains(a), "{a} not covered: {algorithms:?}");
    }
}

#[test]
fn p2p_without_contention_reproduces_alpha_beta() {
    let mut s = small_scenario(4, 4, 1, 1);
    s.cluster.gpus_per_node = 8;
    let cost = Analytic::new(&s);
    let pipe = |p: &Plan| {
        let progs = (0..p.world)
            .map(|r| {
                let mut b = ProgBuilder::new(p.stage_of(r));
                let stage = p.stage_of(r);
                if stage + 1 < 4 {
                    b.send(Peer::PpNext, 64 << 20, 0, &[]);
                }
                if stage > 0 {
                    b.recv(Peer::PpPrev, 64 << 20, 0, &[]);
                }
                b.build()
            })
            .collect();
        per_rank(progs)
    };
    let ab = run(&s, &cost, false, pipe);
    let fl = run(&s, &cost, true, pipe);
    assert!(ab.abs_diff(fl) <= 1, "{ab} vs {fl}");
}

#[test]
fn two_collectives_sharing_links_each_take_twice_as_long() {
    for (tp, dp, gpn, g) in [(8, 1, 8, GroupKind::Tp), (8, 4, 8, GroupKind::Dp)] {
        let s = scenario(tp, dp, gpn);
        let cost = Analytic::new(&s);
        let one = [(Stream::Dp, g, CollectiveKind::AllReduce, 1 << 30)];
        let two = [
            (Stream::Dp, g, CollectiveKind::AllReduce, 1 << 30),
            (Stream::Tp, g, CollectiveKind::AllReduce, 1 << 30),
        ];
        let alone = run(&s, &cost, true, |p| collectives(p, &one));
        let shared = run(&s, &cost, true, |p| collectives(p, &two));
        let ratio = shared as f64 / alone as f64;
        assert!(
            (ratio - 2.0).abs() < 0.02,
            "{g:?}: {alone} vs {shared}: {ratio}"
        );
        // The analytic model lets them run side by side at full speed.
        let ab = run(&s, &cost, false, |p| collectives(p, &two));
        assert!(ab.abs_diff(alone) <= 4);
    }
}

/// Two stages of two data-parallel ranks, one rank per node: stage 0 sends activations to
/// stage 1 while both stages all-reduce gradients, so the sends and the rings share NICs.
#[test]
fn pipeline_p2p_and_dp_all_reduce_slow_each_other() {
    let mut s = small_scenario(1, 2, 2, 1);
    s.cluster.gpus_per_node = 1;
    let cost = Analytic::new(&s);
    let bytes = 256 << 20;
    let build = |send: bool, reduce: bool| {
        move |p: &Plan| {
            let progs = (0..p.world)
                .map(|r| {
                    let mut b = ProgBuilder::new(p.stage_of(r));
                    if send && p.stage_of(r) == 0 {
                        b.send(Peer::PpNext, bytes, 0, &[]);
                    }
                    if send && p.stage_of(r) == 1 {
                        b.recv(Peer::PpPrev, bytes, 0, &[]);
                    }
                    if reduce {
                        b.collective(
                            Stream::Dp,
                            CollectiveKind::AllReduce,
                            GroupKind::Dp,
                            bytes,
                            &[],
                        );
                    }
                    b.build()
                })
                .collect();
            per_rank(progs)
        }
    };
    // (duration of rank 0's send, duration of rank 0's all-reduce) from the trace.
    let durations = |flow: bool, send: bool, reduce: bool| {
        let plan = Plan::new(&s).unwrap();
        let schedule = build(send, reduce)(&plan);
        let net = Network::new(&s.cluster, &cost.links);
        let opts = SimOptions {
            trace: true,
            ..SimOptions::default()
        };
        let r = simulate_on(&plan, &schedule, &cost, flow.then_some(&net), &opts).unwrap();
        let of = |stream: Stream| {
            r.trace
                .as_ref()
                .unwrap()
                .events
                .iter()
                .find(|e| e.rank == 0 && e.stream == stream)
                .map(|e| e.end_ns - e.start_ns)
        };
        (of(Stream::PpSend), of(Stream::Dp))
    };
    let (p2p, _) = durations(true, true, false);
    let (_, ar) = durations(true, false, true);
    let (p2p_shared, ar_shared) = durations(true, true, true);
    let (p2p, ar, p2p_shared, ar_shared) = (
        p2p.unwrap(),
        ar.unwrap(),
        p2p_shared.unwrap(),
        ar_shared.unwrap(),
    );
    // Alone, each is bound by one NIC direction at full rate; together, rank 0's NIC uplink
    // carries the send and one ring edge at once, each at half rate: both take ~2x.
    for (alone, shared) in [(p2p, p2p_shared), (ar, ar_shared)] {
        let ratio = shared as f64 / alone as f64;
        assert!(ratio > 1.9 && ratio < 2.05, "{alone} -> {shared}: {ratio}");
    }
    // The analytic model lets them overlap freely.
    let (p2p_ab, ar_ab) = durations(false, true, true);
    assert!(p2p_ab.unwrap().abs_diff(p2p) <= 2 && ar_ab.unwrap().abs_diff(ar) <= 4);
}

#[test]
fn ranks_of_a_node_share_its_cores() {
    // Four ranks on one node, each computing 1000 ns.
    let plan = plan(1, 1, 4, 1);
    let progs = (0..4)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            b.fwd(1000, &[]);
            b.build()
        })
        .collect();
    let s = per_rank(progs);
    let step = |cores| {
        let cost = SharedCores {
            cores,
            ..SharedCores::default()
        };
        simulate(&plan, &s, &cost, &SimOptions::default())
            .unwrap()
            .step_time_ns
    };
    assert_eq!(step(None), 1000);
    assert_eq!(step(Some(4)), 1000);
    assert_eq!(step(Some(2)), 2000);
    assert_eq!(step(Some(1)), 4000);
    // Three cores for four ranks: ranks are bound to cores by local rank (as the host runtime
    // binds them), so ranks 0 and 3 share core 0 and take twice as long.
    assert_eq!(step(Some(3)), 2000);
}

#[test]
fn compute_overlapping_communication_is_slowed() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    b.fwd(100, &[]);
    // 50 ns all-reduce (FixedCost: bytes) on a group of one, concurrent with the compute.
    b.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        50,
        &[],
    );
    let s = per_rank(vec![b.build()]);
    let run = |slowdown| {
        let cost = SharedCores {
            slowdown,
            ..SharedCores::default()
        };
        simulate(&plan, &s, &cost, &SimOptions::default())
            .unwrap()
            .step_time_ns
    };
    assert_eq!(run(0.0), 100);
    // Slowdown 1: half speed for the first 50 ns (25 ns of work), then 75 ns at full speed.
    assert_eq!(run(1.0), 125);
    // Slowdown 0.25: 40 ns of work in the first 50 ns, 60 after.
    assert_eq!(run(0.25), 110);
}

/// Random overlapping traffic on `plan`: per step, pipeline sends of rank-dependent sizes,
/// or a collective over a random group kind on a random stream, or compute; deterministic in
/// `seed`, and in one global order so that it cannot deadlock.
fn random_traffic(plan: &Plan, seed: u64, steps: u32) -> Schedule {
    let mut x = seed;
    let mut next = move |n: u64| {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    };
    let world = plan.world;
    let mut progs: Vec<ProgBuilder> = (0..world)
        .map(|r| ProgBuilder::new(plan.stage_of(r)))
        .collect();
    let last = plan.stage_of(world - 1);
    for tag in 0..steps {
        match next(3) {
            0 => {
                let base = (1 + next(64)) << 20;
                for (r, b) in progs.iter_mut().enumerate() {
                    let r = r as u32;
                    let stage = plan.stage_of(r);
                    if stage < last {
                        b.send(Peer::PpNext, base * u64::from(1 + r % 3), tag, &[]);
                    }
                    if stage > 0 {
                        let src = plan.pp_prev(r);
                        b.recv(Peer::PpPrev, base * u64::from(1 + src % 3), tag, &[]);
                    }
                }
            }
            1 => {
                let (stream, g) = [
                    (Stream::Tp, GroupKind::Tp),
                    (Stream::Dp, GroupKind::Dp),
                    (Stream::Dp, GroupKind::World),
                ][next(3) as usize];
                let kind = [
                    CollectiveKind::AllReduce,
                    CollectiveKind::AllGather,
                    CollectiveKind::AllToAll,
                ][next(3) as usize];
                let bytes = (1 + next(256)) << 20;
                for b in &mut progs {
                    b.collective(stream, kind, g, bytes, &[]);
                }
            }
            _ => {
                let ns = 1 + next(2_000_000);
                for b in &mut progs {
                    b.fwd(ns, &[]);
                }
            }
        }
    }
    per_rank(progs.into_iter().map(ProgBuilder::build).collect())
}

/// The analytic model with shared cores and an overlap slowdown: compute runs as flows too.
pub(super) struct Cores<'a> {
    pub inner: &'a Analytic,
    pub cores: Option<u32>,
    pub slowdown: f64,
}

impl CostModel for Cores<'_> {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        self.inner.compute_ns(rank, op)
    }
    fn collective_ns(&self, kind: CollectiveKind, g: &Group, bytes: u64, calls: u32) -> u64 {
        self.inner.collective_ns(kind, g, bytes, calls)
    }
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        self.inner.p2p_ns(plan, src, dst, bytes)
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        self.inner.checkpoint_ns(bytes)
    }
    fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
        self.inner.host_ns(work)
    }
    fn compute_is_rank_invariant(&self) -> bool {
        self.inner.compute_is_rank_invariant()
    }
    fn shared_cores(&self) -> Option<u32> {
        self.cores
    }
    fn overlap_compute_slowdown(&self) -> f64 {
        self.slowdown
    }
}

/// The flow model's fast paths (flows that finish together share one completion event;
/// rates are re-solved once per instant, not after every event) must give every op the same
/// start and end as the reference (one event per flow, a re-solve after every event).
/// Generated schedules and random overlapping traffic on an oversubscribed fat-tree with
/// shared NICs, so that flows contend and rates change while batches are pending; with and
/// without compute sharing cores and slowed by overlapping communication. Only the order in
/// which simultaneous completions are recorded may differ, so traces are compared sorted.
#[test]
fn fast_paths_give_every_op_the_same_times_as_the_reference() {
    use crate::scenario::{Fabric, NetworkModel};
    let mut contended = false;
    // (tp, pp, dp, GPUs per node, NICs per node, nodes per leaf, oversubscription): the
    // uplinks are the bottleneck in the first three, the NICs in the last two (a send that
    // another flow joins on an uplink keeps its rate).
    let layouts = [
        (2, 2, 4, 4, 2, 1, 4.0),
        (4, 2, 2, 4, 1, 1, 4.0),
        (2, 4, 2, 2, 1, 1, 4.0),
        (2, 2, 4, 2, 0, 2, 1.0),
        (1, 4, 4, 2, 1, 2, 1.0),
    ];
    for (k, (tp, pp, dp, gpn, nics, per_leaf, oversub)) in layouts.into_iter().enumerate() {
        let mut s = small_scenario(tp, pp, dp, 4);
        s.cluster.gpus_per_node = gpn;
        s.cluster.topology.model = NetworkModel::Flow;
        s.cluster.topology.fabric = Fabric::FatTree;
        s.cluster.topology.nodes_per_leaf = per_leaf;
        s.cluster.topology.oversubscription = oversub;
        s.cluster.topology.nics_per_node = nics;
        let plan = Plan::new(&s).unwrap();
        let mut schedules = vec![crate::schedule::generate(&s, &plan).unwrap()];
        schedules.extend((0..6).map(|seed| random_traffic(&plan, 10 * k as u64 + seed, 60)));
        for schedule in &schedules {
            same_with_and_without_fast_paths(&s, &plan, schedule, &mut contended);
        }
    }
    assert!(contended, "no layout had contention");
}

fn same_with_and_without_fast_paths(
    s: &Scenario,
    plan: &Plan,
    schedule: &Schedule,
    contended: &mut bool,
) {
    let analytic = Analytic::new(s);
    let net = Network::new(&s.cluster, &analytic.links);
    for (cores, slowdown) in [(None, 0.0), (Some(2), 0.5)] {
        let cost = Cores {
            inner: &analytic,
            cores,
            slowdown,
        };
        same_times(plan, schedule, &cost, &net, contended);
    }
}

fn same_times(
    plan: &Plan,
    schedule: &Schedule,
    cost: &dyn CostModel,
    net: &Network,
    contended: &mut bool,
) {
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let trace = |reference: bool| {
        super::flow::REFERENCE.with(|u| u.set(reference));
        let r = simulate_on(plan, schedule, cost, Some(net), &opts);
        super::flow::REFERENCE.with(|u| u.set(false));
        let r = r.unwrap();
        let t = r.trace.unwrap();
        let mut ev: Vec<_> = t
            .events
            .iter()
            .map(|e| (e.rank, e.op, e.start_ns, e.end_ns))
            .collect();
        ev.sort_unstable();
        (r.step_time_ns, r.events, ev)
    };
    let (fast, reference) = (trace(false), trace(true));
    let first_difference = fast.2.iter().zip(&reference.2).find(|(a, b)| a != b);
    assert_eq!(first_difference, None);
    assert_eq!(fast, reference);
    // The analytic model gives other times: the flows did contend.
    let ab = simulate_on(plan, schedule, cost, None, &opts).unwrap();
    *contended |= ab.step_time_ns != fast.0;
}

/// Without a flow network or shared cores, compute slowed by overlapping communication runs
/// on the lean path (`flow::solo`): every op starts and ends when the general path (the
/// solver, per-flow info and batch nodes) has it, in the same order (traces compared as
/// recorded, not sorted), with the fast paths and with the reference, on generated
/// schedules and random overlapping traffic, with collapsed and every-rank runs.
#[test]
fn compute_flows_on_no_resource_run_as_on_the_general_path() {
    let mut slowed = false;
    for (k, (tp, pp, dp)) in [(2, 2, 4), (4, 2, 2), (2, 4, 2), (1, 4, 4)]
        .into_iter()
        .enumerate()
    {
        let s = small_scenario(tp, pp, dp, 4);
        let plan = Plan::new(&s).unwrap();
        let analytic = Analytic::new(&s);
        let mut schedules = vec![crate::schedule::generate(&s, &plan).unwrap()];
        schedules.extend((0..4).map(|seed| random_traffic(&plan, 100 + 10 * k as u64 + seed, 60)));
        for schedule in &schedules {
            for slowdown in [0.189, 0.5] {
                let cost = Cores {
                    inner: &analytic,
                    cores: None,
                    slowdown,
                };
                for (collapse, reference) in [(false, false), (true, false), (false, true)] {
                    let opts = SimOptions {
                        trace: true,
                        collapse,
                        ..SimOptions::default()
                    };
                    let run = |general: bool| {
                        super::flow::GENERAL.with(|g| g.set(general));
                        super::flow::REFERENCE.with(|u| u.set(reference));
                        let r = simulate_on(&plan, schedule, &cost, None, &opts);
                        super::flow::GENERAL.with(|g| g.set(false));
                        super::flow::REFERENCE.with(|u| u.set(false));
                        let r = r.unwrap();
                        let ev: Vec<_> = r
                            .trace
                            .unwrap()
                            .events
                            .iter()
                            .map(|e| (e.rank, e.op, e.start_ns, e.end_ns))
                            .collect();
                        (r.step_time_ns, r.events, ev)
                    };
                    let (lean, general) = (run(false), run(true));
                    assert_eq!(lean, general, "layout {k}, slowdown {slowdown}");
                    let plain = simulate_on(&plan, schedule, &analytic, None, &opts).unwrap();
                    slowed |= plain.step_time_ns != lean.0;
                }
            }
        }
    }
    assert!(slowed, "no communication slowed any compute");
}

/// A hierarchical expert dispatch (`moe_dispatcher = "deepep"`) as flows: alone on the
/// network it takes what the tier model says, and it is faster than NCCL's all-to-all of every
/// copy, inside one node too (a token goes once to each GPU holding its experts).
#[test]
fn hierarchical_expert_dispatch_flows_reproduce_their_estimate() {
    use crate::scenario::{Moe, MoeDispatcher};
    for (gpn, ep) in [(8, 16), (4, 16), (8, 8), (2, 8)] {
        let mut s = scenario(1, ep, gpn);
        s.model.moe = Some(Moe::uniform(64, 8, 1, 1024));
        s.parallel.ep = ep;
        let plan = Plan::new(&s).unwrap();
        let g: &Group = plan.group(plan.group_of(0, GroupKind::Ep));
        let shape = crate::cost::GroupShape {
            ranks: g.members.len() as u32,
            nodes: g.nodes,
            max_per_node: g.max_per_node,
        };
        let mut times = |dispatcher| {
            s.training.moe_dispatcher = dispatcher;
            let cost = Analytic::new(&s);
            let net =
                Network::new(&s.cluster, &cost.links).with_expert_dispatch(cost.expert_dispatch);
            let op = [(
                Stream::Ep,
                GroupKind::Ep,
                CollectiveKind::AllToAll,
                64 << 20,
            )];
            let schedule = collectives(&plan, &op);
            let step = |net: Option<&Network>| {
                simulate_on(&plan, &schedule, &cost, net, &SimOptions::default())
                    .unwrap()
                    .step_time_ns
            };
            (step(None), step(Some(&net)), cost)
        };
        let (ab, fl, cost) = times(MoeDispatcher::DeepEp);
        assert!(
            ab.abs_diff(fl) <= 4,
            "gpn {gpn} ep {ep}: alpha-beta {ab} flow {fl}"
        );
        let dedup = cost.expert_dispatch.unwrap();
        assert_eq!(ab, dedup.estimate(&cost.links, shape, 64 << 20).time_ns);
        let (nccl, nccl_flow, _) = times(MoeDispatcher::AllToAll);
        assert!(
            ab < nccl && fl < nccl_flow,
            "gpn {gpn} ep {ep}: {ab} vs {nccl}"
        );
    }
}

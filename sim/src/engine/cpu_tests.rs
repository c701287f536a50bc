//! Tests of the host model's CPU sharing beyond compute: on the host backend a transfer and a
//! priced allocation are CPU work of the ranks involved, so they share the node's cores with
//! compute (`Flows::start_cpu_work`).

use super::testkit::*;
use super::*;
use crate::plan::GroupKind;
use crate::schedule::{CollectiveKind, MemCategory, Peer, Program, Stream};

fn step(plan: &Plan, s: &Schedule, cores: Option<u32>) -> u64 {
    let cost = SharedCores {
        cores,
        alloc_ns_per_byte: 1,
        ..SharedCores::default()
    };
    simulate(plan, s, &cost, &SimOptions::default())
        .unwrap()
        .step_time_ns
}

/// `ranks` programs of one data-parallel all-reduce of `ns` solo time each.
fn all_reduce_programs(ranks: u32, ns: u64) -> Vec<Program> {
    (0..ranks)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            b.collective(
                Stream::Dp,
                CollectiveKind::AllReduce,
                GroupKind::Dp,
                ns,
                &[],
            );
            b.build()
        })
        .collect()
}

/// `ranks` programs of `ops` compute ops of `ns` solo time each, one after another.
fn compute_programs(ranks: u32, ops: u32, ns: u64) -> Vec<Program> {
    (0..ranks)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            let mut last: Option<u32> = None;
            for _ in 0..ops {
                let deps: Vec<u32> = last.into_iter().collect();
                last = Some(b.fwd(ns, &deps));
            }
            b.build()
        })
        .collect()
}

/// `ranks` programs that each allocate `bytes` of activations and free them.
fn alloc_free_programs(ranks: u32, bytes: u64) -> Vec<Program> {
    (0..ranks)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            let a = b.alloc(MemCategory::Activations, bytes, 1, &[]);
            b.free(1, &[a]);
            b.build()
        })
        .collect()
}

/// Rank 0 computes `compute_ns` then (on its DP stream, at once) all-reduces `ar_ns` of CPU
/// work with rank 1, which only all-reduces. Returns the programs and rank 0's two op ids.
fn compute_beside_all_reduce(compute_ns: u64, ar_ns: u64) -> (Vec<Program>, u32, u32) {
    let mut r0 = ProgBuilder::new(0);
    let f = r0.fwd(compute_ns, &[]);
    let c = r0.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        ar_ns,
        &[],
    );
    let mut progs = all_reduce_programs(1, ar_ns);
    progs.insert(0, r0.build());
    (progs, f, c)
}

#[test]
fn a_collective_takes_a_core_of_every_member() {
    // Four data-parallel ranks on one node all-reduce for 1000 ns of solo time.
    let plan = plan(1, 1, 4, 1);
    let progs = all_reduce_programs(4, 1000);
    let s = per_rank(progs);
    assert_eq!(step(&plan, &s, None), 1000);
    assert_eq!(step(&plan, &s, Some(4)), 1000);
    // Four members on two cores: half a core each.
    assert_eq!(step(&plan, &s, Some(2)), 2000);
}

#[test]
fn communication_and_compute_share_the_cores() {
    // Rank 0 computes 1000 ns while it and rank 1 all-reduce for 1000 ns. Each rank is bound
    // to its own core, so rank 0's compute and its side of the all-reduce share core 0 (half a
    // core each) and the all-reduce ends when rank 0's side does.
    let plan = plan(1, 1, 2, 1);
    let s = per_rank(compute_beside_all_reduce(1000, 1000).0);
    assert_eq!(step(&plan, &s, None), 1000);
    assert_eq!(step(&plan, &s, Some(2)), 2000);
    // A third core does not help: the work is bound to rank 0's core.
    assert_eq!(step(&plan, &s, Some(3)), 2000);
}

#[test]
fn priced_allocations_take_cpu_time() {
    // Two ranks each allocate (and, on the host, write) 1000 bytes at 1 ns per byte.
    let plan = plan(1, 1, 2, 1);
    let progs = alloc_free_programs(2, 1000);
    let s = per_rank(progs);
    assert_eq!(step(&plan, &s, None), 1000);
    assert_eq!(step(&plan, &s, Some(2)), 1000);
    assert_eq!(step(&plan, &s, Some(1)), 2000);
}

/// The run on `cores` shared cores, with its trace.
fn run(plan: &Plan, s: &Schedule, cores: Option<u32>) -> SimResult {
    run_with(
        plan,
        s,
        &SharedCores {
            cores,
            ..SharedCores::default()
        },
    )
}

/// The run costed by `cost`, with its trace.
fn run_with(plan: &Plan, s: &Schedule, cost: &SharedCores) -> SimResult {
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    simulate(plan, s, cost, &opts).unwrap()
}

/// Every op's (start, end, rank) in the run's trace, in time order.
fn spans(r: SimResult) -> Vec<(u64, u64, u32)> {
    let mut spans: Vec<(u64, u64, u32)> = r
        .trace
        .unwrap()
        .events
        .iter()
        .map(|e| (e.start_ns, e.end_ns, e.rank))
        .collect();
    spans.sort_unstable();
    spans
}

#[test]
fn ranks_sharing_a_core_are_busy_for_their_work_and_wait_the_rest() {
    // Two ranks each compute 1000 ns of solo time. On one core processor sharing runs both at
    // half speed, so each op spans 2000 ns; a real run takes turns op by op, so each rank is
    // busy 1000 ns and waits 1000: bubble 50%.
    let plan = plan(1, 1, 2, 1);
    let s = per_rank(compute_programs(2, 1, 1000));
    let shared = run(&plan, &s, Some(1));
    assert_eq!(shared.step_time_ns, 2000);
    for r in &shared.ranks {
        assert_eq!(
            (r.compute_busy_ns, r.comm_exposed_ns, r.idle_ns),
            (1000, 0, 1000)
        );
    }
    assert!((shared.bubble_fraction() - 0.5).abs() < 1e-12);
    // A core each: no waiting.
    let own = run(&plan, &s, Some(2));
    assert_eq!(own.step_time_ns, 1000);
    for r in &own.ranks {
        assert_eq!((r.compute_busy_ns, r.idle_ns), (1000, 0));
    }
}

#[test]
fn a_shared_collective_is_communication_for_its_solo_time() {
    // Four ranks on two cores all-reduce for 1000 ns of solo time: 2000 ns on the clock, of
    // which each rank communicates 1000 and waits for its core 1000.
    let plan = plan(1, 1, 4, 1);
    let progs = all_reduce_programs(4, 1000);
    let r = run(&plan, &per_rank(progs), Some(2));
    assert_eq!(r.step_time_ns, 2000);
    for s in &r.ranks {
        assert_eq!(
            (s.compute_busy_ns, s.comm_exposed_ns, s.idle_ns),
            (0, 1000, 1000)
        );
    }
}

#[test]
fn a_priced_free_takes_its_time_on_the_core() {
    // Each rank allocates 1000 bytes (1 ns per byte) and frees them; a free costs 300 ns of
    // the runtime's own work, CPU work like the allocation.
    let plan = plan(1, 1, 2, 1);
    let progs = alloc_free_programs(2, 1000);
    let s = per_rank(progs);
    let step_with = |cores: Option<u32>, free_ns: u64| {
        let cost = SharedCores {
            cores,
            alloc_ns_per_byte: 1,
            free_ns,
            ..SharedCores::default()
        };
        simulate(&plan, &s, &cost, &SimOptions::default())
            .unwrap()
            .step_time_ns
    };
    assert_eq!(step_with(None, 0), 1000);
    assert_eq!(step_with(None, 300), 1300);
    assert_eq!(step_with(Some(2), 300), 1300);
    // Both ranks on one core: every piece of work is shared.
    assert_eq!(step_with(Some(1), 300), 2600);
}

#[test]
fn a_transfer_into_a_core_that_slept_waits_for_it_to_wake() {
    // Stage 0 computes 1000 ns and sends 100 bytes (100 ns) to stage 1, whose core has run
    // nothing since the step began; stage 1 computes 1000 ns and sends back to stage 0, idle
    // since its op ended.
    let plan = plan(1, 2, 1, 1);
    let wake = Some(crate::host_model::Wake {
        ns: 500.0,
        per_idle: 0.1,
    });
    let mut s0 = ProgBuilder::new(0);
    let f = s0.fwd(1000, &[]);
    s0.send(Peer::PpNext, 100, 0, &[f]);
    let r = s0.recv(Peer::PpNext, 100, 1, &[]);
    s0.fwd(10, &[r]);
    let s = per_rank(vec![s0.build(), s1_again()]);
    let step = |wake| {
        let cost = SharedCores {
            cores: Some(2),
            wake,
            ..SharedCores::default()
        };
        simulate(&plan, &s, &cost, &SimOptions::default())
            .unwrap()
            .step_time_ns
    };
    // Undisturbed: 1000 + 100 + 1000 + 100 + 10.
    assert_eq!(step(None), 2210);
    // The first wait: 500 + 0.1 x 1000 (stage 1 idle since 0); the second: stage 0 idled from
    // 1000 until the reply at 1000 + 700 + 1000 = 2700: 500 + 0.1 x 1700 = 670.
    assert_eq!(step(wake), 1000 + 700 + 1000 + 100 + 670 + 10);
}

#[test]
fn an_op_released_by_another_streams_op_waits_out_the_hand_off() {
    // Stage 0: compute 1000 ns, send 100 bytes (100 ns) released by it, and on its own stream
    // a second compute op of 10 ns; stage 1 receives, computes 1000 ns on the data and sends
    // back (`s1_again`); stage 0 receives and computes 10 ns.
    let plan = plan(1, 2, 1, 1);
    let mut s0 = ProgBuilder::new(0);
    let f = s0.fwd(1000, &[]);
    s0.send(Peer::PpNext, 100, 0, &[f]);
    let g = s0.fwd(10, &[f]);
    let r = s0.recv(Peer::PpNext, 100, 1, &[]);
    s0.fwd(10, &[r, g]);
    let s = per_rank(vec![s0.build(), s1_again()]);
    let run = |handoff_ns| {
        // Each rank on a device of its own: no core sharing to blur the times.
        let cost = SharedCores {
            handoff_ns,
            ..SharedCores::default()
        };
        let opts = SimOptions {
            trace: true,
            ..SimOptions::default()
        };
        simulate(&plan, &s, &cost, &opts).unwrap()
    };
    let start_of = |r: &crate::engine::SimResult, rank: u32, op: u32| {
        let e = r
            .trace
            .as_ref()
            .unwrap()
            .events
            .iter()
            .find(|e| (e.rank, e.op) == (rank, op));
        let e = e.unwrap();
        (e.issued_ns, e.start_ns)
    };
    // At once: 1000 + 100 + 1000 + 100 + 10.
    let r = run(0);
    assert_eq!(r.step_time_ns, 2210);
    // A hand-off of 50 ns before the send (another stream), before stage 1's compute (after
    // its receive), before its send and before stage 0's last op (after its receive): four on
    // the path.
    let r = run(50);
    assert_eq!(r.step_time_ns, 2210 + 4 * 50);
    // The second compute op follows the first on its own stream: no hand-off.
    assert_eq!(start_of(&r, 0, 2), (Some(1000), 1000));
    // The send is issued when the hand-off ends.
    assert_eq!(start_of(&r, 0, 1), (Some(1050), 1050));
}

/// Stage 1 of the wake-up test: receive, compute 1000 ns, send back.
fn s1_again() -> Program {
    let mut s1 = ProgBuilder::new(1);
    let rcv = s1.recv(Peer::PpPrev, 100, 0, &[]);
    let g = s1.fwd(1000, &[rcv]);
    s1.send(Peer::PpPrev, 100, 1, &[g]);
    s1.build()
}

#[test]
fn ranks_sharing_a_core_take_turns_op_by_op() {
    // Two ranks on one core, two compute ops of 1000 ns each. Processor sharing would run
    // both ranks' ops side by side at half speed (each op 0-2000, then 2000-4000); the host
    // runtime runs them in turns (`host_model::turns`): rank 0's first op, then rank 1's first
    // (it was waiting), then rank 0's second, each at full speed.
    let plan = plan(1, 1, 2, 1);
    let s = per_rank(compute_programs(2, 2, 1000));
    let r = run(&plan, &s, Some(1));
    assert_eq!(r.step_time_ns, 4000);
    // Each rank computed 2000 ns and waited 2000 for the core.
    for s in &r.ranks {
        assert_eq!((s.compute_busy_ns, s.idle_ns), (2000, 2000));
    }
    assert_eq!(
        spans(r),
        vec![
            (0, 1000, 0),
            (1000, 2000, 1),
            (2000, 3000, 0),
            (3000, 4000, 1)
        ]
    );
    // On two cores nobody waits.
    assert_eq!(run(&plan, &s, Some(2)).step_time_ns, 2000);
}

#[test]
fn a_turn_passed_to_another_rank_waits_out_the_hand_off() {
    // As `ranks_sharing_a_core_take_turns_op_by_op`, with a hand-off of 50 ns: the thread
    // that gets the turn was asleep on it and wakes, as a thread released by another of its
    // rank's threads does. Each of the three passes costs 50 ns; a rank's second op follows
    // its first on its own stream and pays nothing for that.
    let plan = plan(1, 1, 2, 1);
    let s = per_rank(compute_programs(2, 2, 1000));
    let cost = SharedCores {
        cores: Some(1),
        handoff_ns: 50,
        ..SharedCores::default()
    };
    let r = run_with(&plan, &s, &cost);
    assert_eq!(r.step_time_ns, 4000 + 3 * 50);
    assert_eq!(
        spans(r),
        vec![
            (0, 1000, 0),
            (1050, 2050, 1),
            (2100, 3100, 0),
            (3150, 4150, 1)
        ]
    );
    // On two cores no turn passes: no hand-off.
    let two = SharedCores {
        cores: Some(2),
        ..cost
    };
    assert_eq!(
        simulate(&plan, &s, &two, &SimOptions::default())
            .unwrap()
            .step_time_ns,
        2000
    );
}

#[test]
fn the_op_holding_a_core_shares_it_with_transfers() {
    // Rank 0 computes 1000 ns while it and rank 1 (same core) all-reduce for 1000 ns of CPU
    // work each; rank 1 then computes 1000 ns. Only compute ops take turns: the all-reduce's
    // two sides share the core with rank 0's op (a third each), so all three end at 3000,
    // and rank 1's op runs 3000-4000. Had the transfer waited for the turn, rank 0's op would
    // have ended at 1000.
    let plan = plan(1, 1, 2, 1);
    let mut r0 = ProgBuilder::new(0);
    let f = r0.fwd(1000, &[]);
    r0.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        1000,
        &[],
    );
    let mut r1 = ProgBuilder::new(0);
    let c = r1.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        1000,
        &[],
    );
    r1.fwd(1000, &[c]);
    let r = run(&plan, &per_rank(vec![r0.build(), r1.build()]), Some(1));
    assert_eq!(r.step_time_ns, 4000);
    let events = r.trace.unwrap().events;
    let end = |rank: u32, op: u32| {
        events
            .iter()
            .find(|e| e.rank == rank && e.op == op)
            .map(|e| (e.start_ns, e.end_ns))
    };
    assert_eq!(end(0, f), Some((0, 3000)));
    assert_eq!(end(1, c + 1), Some((3000, 4000)));
}

/// Start and end of `op` of `rank` in a run's trace.
fn span_of(r: &SimResult, rank: u32, op: u32) -> Option<(u64, u64)> {
    r.trace
        .as_ref()?
        .events
        .iter()
        .find(|e| e.rank == rank && e.op == op)
        .map(|e| (e.start_ns, e.end_ns))
}

/// Rank 0's op `op` ended within a nanosecond of `expected_ns` (rates in weighted shares are
/// not whole nanoseconds).
fn assert_ends_near(r: &SimResult, op: u32, expected_ns: f64) {
    let want = expected_ns.round() as u64;
    let (_, end) = span_of(r, 0, op).unwrap();
    assert!(
        end.abs_diff(want) <= 1,
        "op {op} ended at {end}, expected {want}"
    );
}

#[test]
fn a_core_weighs_compute_work_as_the_runtime_weighs_its_thread() {
    // As `the_op_holding_a_core_shares_it_with_transfers`, but read at the collective's end:
    // the host runtime's compute thread runs at a lower priority (nice 5, weight w = 335/1024
    // of a nice-0 thread's), so the core gives rank 0's op w / (2 + w) of itself and each side
    // of the all-reduce 1 / (2 + w). The all-reduce ends at 1000 (2 + w); the op then runs
    // alone and still ends at 3000 (the core's total work is unchanged).
    let w = crate::cost::host_compute_weight();
    assert!(w < 0.5, "{w}");
    let plan = plan(1, 1, 2, 1);
    let (progs, f, c0) = compute_beside_all_reduce(1000, 1000);
    let s = per_rank(progs);
    let r = run(&plan, &s, Some(1));
    assert_ends_near(&r, c0, 1000.0 * (2.0 + w));
    assert_eq!(span_of(&r, 0, f), Some((0, 3000)));
    // A core of its own for each rank: the op and rank 0's side share core 0 by weight.
    let r = run(&plan, &s, Some(2));
    assert_ends_near(&r, c0, 1000.0 * (1.0 + w));
    assert_eq!(span_of(&r, 0, f).map(|s| s.1), Some(2000));
}

#[test]
fn the_cost_models_compute_weight_sets_the_share() {
    // `a_core_weighs_compute_work_as_the_runtime_weighs_its_thread` on two cores with a
    // profile's measured weight: 0.05 (a transfer barely slowed by the compute op beside it)
    // and 0 (the transfer takes the core whole while it runs: the engine keeps a thousandth
    // for the compute op, as the flow solver counts a weight of 0 as 1).
    let plan = plan(1, 1, 2, 1);
    let (progs, f, c0) = compute_beside_all_reduce(1000, 1000);
    let s = per_rank(progs);
    for w in [0.05f64, 0.0] {
        let expect: f64 = f64::max(w, 1e-3);
        let cost = SharedCores {
            cores: Some(2),
            compute_weight: Some(w),
            ..SharedCores::default()
        };
        let r = run_with(&plan, &s, &cost);
        assert_ends_near(&r, c0, 1000.0 * (1.0 + expect));
        assert_eq!(span_of(&r, 0, f).map(|s| s.1), Some(2000));
    }
}

#[test]
fn a_compute_op_that_loses_its_core_to_a_transfer_pays_the_switch_back() {
    // Rank 0 computes 1000 ns on core 0 while its side of an all-reduce (1000 ns of CPU work,
    // the other side on core 1) takes the core whole (compute weight 0): the op is paused
    // for the all-reduce's 1001 ns, then its thread must get the core back, a hand-off of
    // 50 ns, before the rest of its work. Without a hand-off, nothing is added.
    let plan = plan(1, 1, 2, 1);
    let (progs, f, c0) = compute_beside_all_reduce(1000, 1000);
    let s = per_rank(progs);
    let end_of = |handoff_ns: u64| {
        let cost = SharedCores {
            cores: Some(2),
            compute_weight: Some(0.0),
            handoff_ns,
            ..SharedCores::default()
        };
        let r = run_with(&plan, &s, &cost);
        assert_ends_near(&r, c0, 1001.0);
        span_of(&r, 0, f).map(|s| s.1).unwrap()
    };
    assert_eq!(end_of(0), 2000);
    assert_eq!(end_of(50), 2050);
}

#[test]
fn an_allocation_weighs_as_the_thread_of_its_stream() {
    // Rank 0 allocates 1000 bytes (1000 ns of CPU work) on its compute stream while both
    // ranks, on one core, all-reduce for 1000 ns each: the compute thread's allocation gets
    // the compute weight, so the all-reduce ends first, at 1000 (2 + w), and the allocation
    // at 3000. Equal weights would have ended all three at 3000.
    let w = crate::cost::host_compute_weight();
    let plan = plan(1, 1, 2, 1);
    let mut r0 = ProgBuilder::new(0);
    let a = r0.alloc(MemCategory::Activations, 1000, 1, &[]);
    let c0 = r0.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        1000,
        &[],
    );
    r0.free(1, &[a]);
    let cost = SharedCores {
        cores: Some(1),
        alloc_ns_per_byte: 1,
        ..SharedCores::default()
    };
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let mut progs = all_reduce_programs(1, 1000);
    progs.insert(0, r0.build());
    let r = simulate(&plan, &per_rank(progs), &cost, &opts).unwrap();
    assert_ends_near(&r, c0, 1000.0 * (2.0 + w));
    assert_eq!(span_of(&r, 0, a), Some((0, 3000)));
}

#[test]
fn a_p2p_works_on_its_cores_for_its_cpu_share_and_waits_out_the_rest() {
    // Rank 0 sends 1000 ns of p2p to rank 1, which computes 3000 ns beside its receive; a
    // core each, the compute thread weighing 0.5 against the transfer's 1. All of it CPU work
    // (share 1): the receive's side gets 2/3 of core 1 and ends at 1500, and the compute op
    // loses 1000 ns of core time (ends at 4000). Half of it (share 0.5): 500 ns of work on
    // each core, done on core 1 at 750, then 500 ns asleep; the compute op loses 500.
    let plan = plan(1, 2, 1, 1);
    let mut s0 = ProgBuilder::new(0);
    let send = s0.send(Peer::PpNext, 1000, 0, &[]);
    let mut s1 = ProgBuilder::new(1);
    let f = s1.fwd(3000, &[]);
    let recv = s1.recv(Peer::PpPrev, 1000, 0, &[]);
    let s = per_rank(vec![s0.build(), s1.build()]);
    for (share, transfer_end, compute_end) in [(None, 1500, 4000), (Some(0.5), 1250, 3500)] {
        let cost = SharedCores {
            cores: Some(2),
            compute_weight: Some(0.5),
            p2p_cpu_share: share,
            ..SharedCores::default()
        };
        let r = run_with(&plan, &s, &cost);
        assert_eq!(span_of(&r, 0, send), Some((0, transfer_end)), "{share:?}");
        assert_eq!(span_of(&r, 1, recv), Some((0, transfer_end)), "{share:?}");
        assert_eq!(span_of(&r, 1, f), Some((0, compute_end)), "{share:?}");
    }
    // Alone on its cores, a p2p takes its price whatever its share.
    let mut s0 = ProgBuilder::new(0);
    let send = s0.send(Peer::PpNext, 1000, 0, &[]);
    let mut s1 = ProgBuilder::new(1);
    s1.recv(Peer::PpPrev, 1000, 0, &[]);
    let s = per_rank(vec![s0.build(), s1.build()]);
    for share in [None, Some(0.5), Some(0.0)] {
        let cost = SharedCores {
            cores: Some(2),
            p2p_cpu_share: share,
            ..SharedCores::default()
        };
        let r = run_with(&plan, &s, &cost);
        assert_eq!(span_of(&r, 0, send), Some((0, 1000)), "{share:?}");
    }
}

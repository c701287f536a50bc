//! Hand-made schedules with hand-computed answers, closed-form pipeline bubbles, and every
//! error path of the engine.

use super::testkit::*;
use super::*;
use crate::cost::Analytic;
use crate::schedule::{
    CollectiveKind, Device, Label, MemCategory, OpKind, Peer, Phase, Program, Stream,
};
use crate::testing::small_scenario;

fn sim(plan: &Plan, s: &Schedule) -> Result<SimResult, SimError> {
    simulate(
        plan,
        s,
        &FixedCost::default(),
        &SimOptions {
            trace: true,
            ..SimOptions::default()
        },
    )
}

/// End time of (rank, op) from the trace.
fn end_of(r: &SimResult, rank: u32, op: u32) -> u64 {
    r.trace
        .as_ref()
        .unwrap()
        .events
        .iter()
        .find(|e| e.rank == rank && e.op == op)
        .map(|e| e.end_ns)
        .unwrap()
}

#[test]
fn streams_overlap_and_deps_wait() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    let a = b.fwd(10, &[]); // compute 0..10
    let c = b.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        7,
        &[a],
    ); // dp 10..17 (group of one still takes 7 ns under FixedCost)
    let d = b.fwd(5, &[a]); // compute 10..15, overlaps the collective
    let e = b.fwd(1, &[c, d]); // 17..18
    let r = sim(&plan, &per_rank(vec![b.build()])).unwrap();
    assert_eq!(end_of(&r, 0, c), 17);
    assert_eq!(end_of(&r, 0, d), 15);
    assert_eq!(end_of(&r, 0, e), 18);
    assert_eq!(r.step_time_ns, 18);
    assert_eq!(r.events, 4);
    let s = &r.ranks[0];
    assert_eq!(s.compute_busy_ns, 16);
    assert_eq!(s.comm_exposed_ns, 2); // 15..17
    assert_eq!(s.idle_ns, 0);
    assert_eq!(s.flops, 16);
    assert_eq!(s.model_flops, 16);
}

#[test]
fn stream_fifo_blocks_later_ready_ops() {
    // Op 1 waits on op 0 (10 ns); op 2 has no deps but sits behind op 1 on the same stream.
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    let a = b.compute(Stream::Io, Phase::Forward, 10, &[]);
    let x = b.fwd(3, &[a]);
    let y = b.fwd(4, &[]);
    let r = sim(&plan, &per_rank(vec![b.build()])).unwrap();
    assert_eq!(end_of(&r, 0, x), 13);
    assert_eq!(end_of(&r, 0, y), 17);
}

#[test]
fn collective_starts_when_the_last_member_arrives() {
    // tp = 4: ranks 0..4 form one TP group; rank r computes 10*(r+1) ns first.
    let plan = plan(4, 1, 1, 1);
    let programs = (0u32..4)
        .map(|r| {
            let mut b = ProgBuilder::new(0);
            let c = b.fwd(10 * (u64::from(r) + 1), &[]);
            b.collective(
                Stream::Tp,
                CollectiveKind::AllReduce,
                GroupKind::Tp,
                5,
                &[c],
            );
            b.build()
        })
        .collect();
    let r = sim(&plan, &per_rank(programs)).unwrap();
    for rank in 0..4 {
        assert_eq!(end_of(&r, rank, 1), 45);
        let ev = r
            .trace
            .as_ref()
            .unwrap()
            .events
            .iter()
            .find(|e| e.rank == rank && e.op == 1);
        assert_eq!(
            ev.unwrap().start_ns,
            40,
            "transfer starts at the last arrival"
        );
    }
    assert_eq!(r.step_time_ns, 45);
    // Rank 0 computed 10, waited 30 (idle), transferred 5 (exposed).
    assert_eq!(r.ranks[0].compute_busy_ns, 10);
    assert_eq!(r.ranks[0].idle_ns, 30);
    assert_eq!(r.ranks[0].comm_exposed_ns, 5);
    assert!((r.exposed_comm_fraction() - 5.0 / 45.0).abs() < 1e-12);
}

#[test]
fn p2p_rendezvous_waits_for_both_sides() {
    let plan = plan(1, 2, 1, 1);
    let mut s0 = ProgBuilder::new(0);
    let c = s0.fwd(10, &[]);
    s0.send(Peer::PpNext, 4, 7, &[c]);
    let mut s1 = ProgBuilder::new(1);
    let w = s1.fwd(20, &[]);
    let rv = s1.recv(Peer::PpPrev, 4, 7, &[w]);
    s1.fwd(1, &[rv]);
    let r = sim(&plan, &per_stage(&plan, vec![s0.build(), s1.build()])).unwrap();
    assert_eq!(end_of(&r, 0, 1), 24);
    assert_eq!(end_of(&r, 1, 1), 24);
    assert_eq!(end_of(&r, 1, 2), 25);
}

#[test]
fn p2p_tags_select_the_partner() {
    // Stage 0 sends tag 1 then tag 2 (different streams); stage 1 receives tag 2 first.
    let plan = plan(1, 2, 1, 1);
    let mut s0 = ProgBuilder::new(0);
    s0.op(
        Stream::PpSend,
        OpKind::Send {
            peer: Peer::PpNext,
            bytes: 3,
            tag: 1,
        },
        &[],
        Label::default(),
    );
    s0.op(
        Stream::Io,
        OpKind::Send {
            peer: Peer::PpNext,
            bytes: 5,
            tag: 2,
        },
        &[],
        Label::default(),
    );
    let mut s1 = ProgBuilder::new(1);
    let a = s1.recv(Peer::PpPrev, 5, 2, &[]);
    s1.recv(Peer::PpPrev, 3, 1, &[a]);
    let r = sim(&plan, &per_stage(&plan, vec![s0.build(), s1.build()])).unwrap();
    assert_eq!(end_of(&r, 1, 0), 5);
    assert_eq!(end_of(&r, 1, 1), 8);
    assert_eq!(end_of(&r, 0, 0), 8);
}

fn bubble(kind: Pipeline, p: u32, m: u32) -> f64 {
    let plan = plan(1, p, 1, u64::from(m));
    let s = pipeline(&plan, kind, m, 100, 200, 0);
    let r = sim(&plan, &s).unwrap();
    assert_eq!(r.events, engine_ops(&s));
    r.bubble_fraction()
}

#[test]
fn gpipe_and_1f1b_bubbles_match_the_closed_form() {
    for kind in [Pipeline::Gpipe, Pipeline::OneFOneB] {
        for (p, m) in [(2, 4), (4, 8), (4, 16), (8, 8), (8, 32)] {
            let got = bubble(kind, p, m);
            let want = f64::from(p - 1) / f64::from(m + p - 1);
            assert!(
                (got - want).abs() <= 0.005 * want,
                "{kind:?} p={p} m={m}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn one_stage_has_no_bubble() {
    assert_eq!(bubble(Pipeline::OneFOneB, 1, 8), 0.0);
    assert_eq!(bubble(Pipeline::Gpipe, 1, 8), 0.0);
}

#[test]
fn one_f_one_b_holds_fewer_activations_than_gpipe() {
    let plan = plan(1, 4, 1, 8);
    let peak = |kind| {
        let r = sim(&plan, &pipeline(&plan, kind, 8, 100, 200, 0)).unwrap();
        r.ranks[0].peak_memory_bytes
    };
    // Each micro batch holds 100 bytes of activations from its forward to its backward.
    assert_eq!(peak(Pipeline::Gpipe), 800);
    assert_eq!(peak(Pipeline::OneFOneB), 400); // stage 0 keeps p = 4 in flight
}

/// Allocs and frees that fall on one instant apply in program order, whichever streams they
/// are on and whatever order the engine handled that instant's events in: a free issued before
/// an alloc lowers the peak, one issued after it does not. The replayed trace shows each at
/// its time with the memory live after it.
#[test]
fn memory_ops_of_one_instant_apply_in_program_order() {
    let plan = plan(1, 1, 1, 1);
    let alloc_on = |stream, bytes, tag, deps: &[u32], b: &mut ProgBuilder| {
        b.op(
            stream,
            OpKind::Alloc {
                category: MemCategory::Buffers,
                device: Device::Gpu,
                bytes,
                tag,
            },
            deps,
            Label::default(),
        )
    };
    for (free_first, stream) in [
        (true, Stream::Tp),
        (false, Stream::Tp),
        (true, Stream::Dp),
        (false, Stream::Dp),
    ] {
        let mut b = ProgBuilder::new(0);
        alloc_on(Stream::Compute, 50, 0, &[], &mut b);
        let f = b.fwd(10, &[]);
        // At t = 10 both: the free of tag 0 on the compute stream, the alloc of tag 1 on
        // another stream, in the order the case gives.
        let (free, alloc) = if free_first {
            let fr = b.free(0, &[f]);
            (fr, alloc_on(stream, 100, 1, &[f], &mut b))
        } else {
            let a = alloc_on(stream, 100, 1, &[f], &mut b);
            (b.free(0, &[f]), a)
        };
        let g = b.fwd(5, &[alloc]);
        b.op(stream, OpKind::Free { tag: 1 }, &[g], Label::default());
        let r = sim(&plan, &per_rank(vec![b.build()])).unwrap();
        let s = &r.ranks[0];
        let case = format!("free first {free_first}, {stream:?}");
        assert_eq!(
            s.peak_memory_bytes,
            if free_first { 100 } else { 150 },
            "{case}"
        );
        assert_eq!((s.peak_time_ns, s.peak_op), (10, Some(alloc)), "{case}");
        assert_eq!(r.step_time_ns, 15, "{case}");
        let t = r.trace.unwrap();
        let at = |op: u32| t.events.iter().find(|e| e.op == op).unwrap();
        assert_eq!((at(free).end_ns, at(alloc).end_ns), (10, 10), "{case}");
        assert_eq!(
            at(alloc).mem_bytes,
            if free_first { 100 } else { 150 },
            "{case}"
        );
        assert_eq!(
            at(free).mem_bytes,
            if free_first { 0 } else { 100 },
            "{case}"
        );
        // The compute op ends at 10, before both in program order: 50 live.
        assert_eq!(at(f).mem_bytes, 50, "{case}");
    }
}

#[test]
fn memory_peak_time_op_and_breakdown() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    b.alloc(MemCategory::Weights, 1000, 0, &[]);
    let a1 = b.alloc(MemCategory::Activations, 300, 1, &[]);
    let f = b.fwd(10, &[a1]);
    let a2 = b.alloc(MemCategory::Buffers, 50, 2, &[f]); // peak 1350 at t=10
    let g = b.fwd(5, &[a2]);
    b.free(1, &[g]);
    b.free(2, &[g]);
    let a3 = b.alloc(MemCategory::Activations, 320, 3, &[g]); // 1320 < peak
    b.free(3, &[a3]);
    let host = b.op(
        Stream::Io,
        OpKind::Alloc {
            category: MemCategory::Optimizer,
            device: Device::Host,
            bytes: 4096,
            tag: 9,
        },
        &[],
        Label::default(),
    );
    b.op(
        Stream::Io,
        OpKind::Free { tag: 9 },
        &[host],
        Label::default(),
    );
    b.free(0, &[]);
    let r = sim(&plan, &per_rank(vec![b.build()])).unwrap();
    let s = &r.ranks[0];
    assert_eq!(s.peak_memory_bytes, 1350);
    assert_eq!(s.peak_time_ns, 10);
    assert_eq!(s.peak_op, Some(a2));
    assert_eq!(s.memory_at_peak, [1000, 0, 0, 300, 50, 0]);
    assert_eq!(s.host_memory_peak_bytes, 4096);
    let t = r.trace.unwrap();
    let last = t.memory.last().unwrap();
    assert_eq!(last.bytes, [0; MemCategory::COUNT]);
    assert_eq!(last.time_ns, 15);
    let before_last = &t.memory[t.memory.len() - 2];
    assert_eq!(before_last.bytes, [1000, 0, 0, 0, 0, 0]);
    assert_eq!(s.end_memory_bytes, 0);
    assert_eq!(s.over_capacity_op, None);
}

#[test]
fn an_unfreed_allocation_is_an_error() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    b.alloc(MemCategory::Weights, 1000, 0, &[]);
    let a = b.alloc(MemCategory::Activations, 300, 1, &[]);
    b.fwd(10, &[a]);
    b.free(0, &[]);
    assert_eq!(
        sim(&plan, &per_rank(vec![b.build()])).unwrap_err(),
        SimError::UnfreedAlloc {
            program: 0,
            op: 1,
            tag: 1
        }
    );
}

#[test]
fn first_alloc_over_capacity_is_noted_with_its_time() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    let a0 = b.alloc(MemCategory::Weights, 1000, 0, &[]);
    let f = b.fwd(10, &[a0]);
    let over = b.alloc(MemCategory::Activations, 300, 1, &[f]); // 1300 > 1200 at t=10
    let g = b.fwd(5, &[over]);
    let peak = b.alloc(MemCategory::Activations, 400, 2, &[g]); // 1700: the peak, at t=15
    b.free(2, &[peak]);
    b.free(1, &[]);
    b.free(0, &[]);
    let opts = SimOptions {
        memory_capacity_bytes: 1200,
        ..SimOptions::default()
    };
    let r = simulate(
        &plan,
        &per_rank(vec![b.build()]),
        &FixedCost::default(),
        &opts,
    )
    .unwrap();
    let s = &r.ranks[0];
    assert_eq!(s.peak_op, Some(peak));
    assert_eq!(s.peak_time_ns, 15);
    assert_eq!(s.over_capacity_op, Some(over));
    assert_eq!(s.over_capacity_time_ns, 10);
    assert_eq!(s.end_memory_bytes, 0);
}

#[test]
fn straggler_costs_are_asked_per_rank() {
    let plan = plan(2, 1, 1, 1);
    let programs = (0u32..2)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            let c = b.fwd(10, &[]);
            b.collective(
                Stream::Tp,
                CollectiveKind::AllReduce,
                GroupKind::Tp,
                1,
                &[c],
            );
            b.build()
        })
        .collect();
    let s = per_rank(programs);
    let slow = FixedCost {
        straggler: Some((1, 3)),
        ..FixedCost::default()
    };
    let r = simulate(&plan, &s, &slow, &SimOptions::default()).unwrap();
    assert_eq!(r.step_time_ns, 31);
    assert_eq!(r.ranks[0].idle_ns, 20);
}

#[test]
fn deadlock_names_ranks_ops_and_what_they_wait_for() {
    // Both stages post a send first on one stream, then the receive: neither receive is ever
    // posted, so both sends wait forever.
    let plan = plan(1, 2, 1, 1);
    let programs = (0u32..2)
        .map(|s| {
            let mut b = ProgBuilder::new(s);
            b.op(
                Stream::PpSend,
                OpKind::Send {
                    peer: Peer::PpNext,
                    bytes: 1,
                    tag: 0,
                },
                &[],
                Label::default(),
            );
            b.op(
                Stream::PpSend,
                OpKind::Recv {
                    peer: Peer::PpPrev,
                    bytes: 1,
                    tag: 0,
                },
                &[],
                Label::default(),
            );
            b.fwd(1, &[1]);
            b.build()
        })
        .collect();
    let err = sim(&plan, &per_stage(&plan, programs)).unwrap_err();
    let SimError::Deadlock(d) = &err else {
        panic!("{err}")
    };
    assert_eq!(d.blocked_ranks, 2);
    assert_eq!(d.ranks.len(), 2);
    assert_eq!(d.ranks[0].heads.len(), 2);
    let send = &d.ranks[0].heads[0];
    assert_eq!(send.stream, Stream::Compute);
    assert!(send.waiting_for.contains("op 1"), "{}", send.waiting_for);
    let send = &d.ranks[0].heads[1];
    assert_eq!(send.stream, Stream::PpSend);
    assert_eq!(send.op, 0);
    assert!(send.name.starts_with("send PpNext"), "{}", send.name);
    assert!(
        send.waiting_for
            .contains("rank 1 to post a receive with tag 0"),
        "{}",
        send.waiting_for
    );
    let msg = err.to_string();
    assert!(msg.contains("2 rank(s) cannot finish"), "{msg}");
    assert!(msg.contains("rank 1:"), "{msg}");
}

#[test]
fn deadlock_on_a_collective_lists_missing_members() {
    let plan = plan(4, 1, 1, 1);
    let programs = (0u32..4)
        .map(|r| {
            let mut b = ProgBuilder::new(0);
            if r != 2 {
                b.collective(Stream::Tp, CollectiveKind::AllGather, GroupKind::Tp, 1, &[]);
            } else {
                b.fwd(1, &[]);
            }
            b.build()
        })
        .collect();
    let err = sim(&plan, &per_rank(programs)).unwrap_err();
    let SimError::Deadlock(d) = &err else {
        panic!("{err}")
    };
    assert_eq!(d.blocked_ranks, 3);
    assert_eq!(d.time_ns, 1);
    let w = &d.ranks[0].heads[0].waiting_for;
    assert!(w.contains("1 of 4 members missing: [2]"), "{w}");
}

#[test]
fn many_blocked_ranks_are_summarised() {
    let plan = plan(8, 1, 2, 1);
    let programs = (0..16)
        .map(|r| {
            let mut b = ProgBuilder::new(0);
            if r != 0 {
                b.collective(
                    Stream::Dp,
                    CollectiveKind::AllReduce,
                    GroupKind::World,
                    1,
                    &[],
                );
            }
            b.build()
        })
        .collect();
    let err = sim(&plan, &per_rank(programs)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("15 rank(s) cannot finish"), "{msg}");
    assert!(msg.contains("... and 7 more rank(s)"), "{msg}");
    assert!(msg.contains("missing: [0]"), "{msg}");
}

#[test]
fn mismatched_collectives_are_errors() {
    let plan = plan(2, 1, 1, 1);
    let programs = (0u32..2)
        .map(|r| {
            let mut b = ProgBuilder::new(0);
            b.collective(
                Stream::Tp,
                CollectiveKind::AllReduce,
                GroupKind::Tp,
                10 + u64::from(r),
                &[],
            );
            b.build()
        })
        .collect();
    let err = sim(&plan, &per_rank(programs)).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::CollectiveMismatch {
                rank: 1,
                first_rank: 0,
                seq: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn mismatched_p2p_sizes_are_errors() {
    let plan = plan(1, 2, 1, 1);
    let mut s0 = ProgBuilder::new(0);
    s0.send(Peer::PpNext, 8, 0, &[]);
    let mut s1 = ProgBuilder::new(1);
    s1.recv(Peer::PpPrev, 9, 0, &[]);
    let err = sim(&plan, &per_stage(&plan, vec![s0.build(), s1.build()])).unwrap_err();
    assert_eq!(
        err,
        SimError::P2pMismatch {
            src: 0,
            dst: 1,
            tag: 0,
            send_bytes: 8,
            recv_bytes: 9
        }
    );
}

#[test]
fn malformed_programs_are_errors() {
    let plan = plan(1, 1, 1, 1);
    let mut b = ProgBuilder::new(0);
    b.fwd(1, &[0]);
    assert_eq!(
        sim(&plan, &per_rank(vec![b.build()])).unwrap_err(),
        SimError::BadDependency {
            program: 0,
            op: 0,
            dep: 0
        }
    );
    let mut b = ProgBuilder::new(0);
    b.free(3, &[]);
    assert_eq!(
        sim(&plan, &per_rank(vec![b.build()])).unwrap_err(),
        SimError::UnmatchedFree {
            program: 0,
            op: 0,
            tag: 3
        }
    );
    // A free on another stream that runs before its alloc.
    let mut b = ProgBuilder::new(0);
    let c = b.fwd(5, &[]);
    b.alloc(MemCategory::Buffers, 10, 1, &[c]);
    b.op(Stream::Io, OpKind::Free { tag: 1 }, &[], Label::default());
    let err = sim(&plan, &per_rank(vec![b.build()])).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::FreeBeforeAlloc {
                rank: 0,
                op: 2,
                alloc: 1,
                ..
            }
        ),
        "{err}"
    );
    let two = per_rank(vec![Program::default(), Program::default()]);
    assert_eq!(
        sim(&plan, &two).unwrap_err(),
        SimError::WorldMismatch {
            schedule: 2,
            plan: 1
        }
    );
    let bad = Schedule {
        programs: vec![],
        program_of: vec![0],
    };
    assert!(matches!(
        sim(&plan, &bad).unwrap_err(),
        SimError::NoSuchProgram {
            rank: 0,
            program: 0,
            programs: 0
        }
    ));
}

#[test]
fn event_bound_is_enforced() {
    let plan = plan(1, 4, 1, 4);
    let s = pipeline(&plan, Pipeline::OneFOneB, 4, 10, 20, 1);
    let opts = SimOptions {
        trace: false,
        max_events: 10,
        ..SimOptions::default()
    };
    // Refused before the run: the ranks' programs hold more ops than the bound.
    assert_eq!(
        simulate(&plan, &s, &FixedCost::default(), &opts).unwrap_err(),
        SimError::WorkTooLarge {
            events: engine_ops(&s),
            ranks: plan.world,
            limit: 10
        }
    );
    // The bound counts the events the engine processes: not the unpriced allocs and frees.
    assert!(engine_ops(&s) < s.total_ops());
    let exact = SimOptions {
        max_events: engine_ops(&s),
        ..opts
    };
    assert!(simulate(&plan, &s, &FixedCost::default(), &exact).is_ok());
}

#[test]
fn trace_bound_is_enforced_before_the_run() {
    let plan = plan(1, 4, 1, 4);
    let s = pipeline(&plan, Pipeline::OneFOneB, 4, 10, 20, 1);
    let events = s.total_ops();
    let opts = SimOptions {
        trace: true,
        max_trace_bytes: events * super::TRACE_BYTES_PER_EVENT - 1,
        ..SimOptions::default()
    };
    assert_eq!(
        simulate(&plan, &s, &FixedCost::default(), &opts).unwrap_err(),
        SimError::TraceTooLarge {
            events,
            ranks: plan.world,
            estimate_bytes: events * super::TRACE_BYTES_PER_EVENT,
            limit_bytes: events * super::TRACE_BYTES_PER_EVENT - 1,
        }
    );
    // The same bound without a trace, and a trace within it, run.
    let untraced = SimOptions {
        trace: false,
        ..opts.clone()
    };
    assert!(simulate(&plan, &s, &FixedCost::default(), &untraced).is_ok());
    let traced = SimOptions {
        max_trace_bytes: events * super::TRACE_BYTES_PER_EVENT,
        ..opts
    };
    let r = simulate(&plan, &s, &FixedCost::default(), &traced).unwrap();
    let json = r.trace.as_ref().unwrap().to_chrome_json(&plan, &s);
    // The per-event allowance bounds the JSON actually written.
    assert!(
        (json.len() as u64) <= events * super::TRACE_BYTES_PER_EVENT,
        "{} bytes for {events} events",
        json.len()
    );
}

/// With `trace_ranks`, the bound counts the listed ranks' ops only, and the trace holds
/// their events and memory samples only.
#[test]
fn trace_bound_counts_the_traced_ranks_only() {
    let plan = plan(1, 4, 1, 4);
    let s = pipeline(&plan, Pipeline::OneFOneB, 4, 10, 20, 1);
    let ops = |r: u32| s.get_program(r).unwrap().ops.len() as u64;
    let listed = ops(1) + ops(3);
    assert!(listed < s.total_ops());
    let opts = SimOptions {
        trace: true,
        trace_ranks: Some(vec![1, 3]),
        max_trace_bytes: listed * super::TRACE_BYTES_PER_EVENT - 1,
        ..SimOptions::default()
    };
    assert_eq!(
        simulate(&plan, &s, &FixedCost::default(), &opts).unwrap_err(),
        SimError::TraceTooLarge {
            events: listed,
            ranks: 2,
            estimate_bytes: listed * super::TRACE_BYTES_PER_EVENT,
            limit_bytes: listed * super::TRACE_BYTES_PER_EVENT - 1,
        }
    );
    let fits = SimOptions {
        max_trace_bytes: listed * super::TRACE_BYTES_PER_EVENT,
        ..opts
    };
    let r = simulate(&plan, &s, &FixedCost::default(), &fits).unwrap();
    let every = simulate(
        &plan,
        &s,
        &FixedCost::default(),
        &SimOptions {
            trace: true,
            ..SimOptions::default()
        },
    )
    .unwrap();
    // The same step; the trace is the full one's events of ranks 1 and 3, in its order.
    assert_eq!(r.ranks, every.ranks);
    let (t, all) = (r.trace.unwrap(), every.trace.unwrap());
    let keep = |rank: u32| rank == 1 || rank == 3;
    let expected: Vec<_> = all.events.iter().filter(|e| keep(e.rank)).collect();
    assert_eq!(t.events.iter().collect::<Vec<_>>(), expected);
    assert_eq!(t.events.len() as u64, listed);
    let samples: Vec<_> = all.memory.iter().filter(|m| keep(m.rank)).collect();
    assert!(!samples.is_empty());
    assert_eq!(t.memory.iter().collect::<Vec<_>>(), samples);
}

#[test]
fn empty_schedule_finishes_at_zero() {
    let plan = plan(2, 1, 1, 1);
    let s = per_rank(vec![Program::default(), Program::default()]);
    let r = sim(&plan, &s).unwrap();
    assert_eq!(r.step_time_ns, 0);
    assert_eq!(r.bubble_fraction(), 0.0);
    assert_eq!(r.ranks[1].peak_op, None);
}

#[test]
fn analytic_model_runs_a_pipeline_deterministically() {
    let sc = small_scenario(2, 4, 2, 8);
    let plan = Plan::new(&sc).unwrap();
    let s = pipeline(&plan, Pipeline::OneFOneB, 8, 1_000_000, 2_000_000, 8 << 20);
    let model = Analytic::new(&sc);
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let a = simulate(&plan, &s, &model, &opts).unwrap();
    let b = simulate(&plan, &s, &model, &opts).unwrap();
    assert_eq!(a, b);
    let ja = a.trace.as_ref().unwrap().to_chrome_json(&plan, &s);
    let jb = b.trace.as_ref().unwrap().to_chrome_json(&plan, &s);
    assert_eq!(ja, jb);
    // Analytic compute of an op with only `flops` (no GEMMs) is priced on the FP32 vector
    // units, so the step is far longer than the FixedCost one; p2p adds time on top.
    assert!(a.step_time_ns > 0);
    for r in &a.ranks {
        assert_eq!(
            r.compute_busy_ns + r.comm_exposed_ns + r.idle_ns,
            a.step_time_ns
        );
    }
}

#[test]
fn chrome_trace_is_valid_json_with_processes_threads_and_counters() {
    let plan = plan(1, 2, 1, 2);
    let s = pipeline(&plan, Pipeline::OneFOneB, 2, 1500, 3000, 10);
    let r = sim(&plan, &s).unwrap();
    let json = r.trace.as_ref().unwrap().to_chrome_json(&plan, &s);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["rank 0 (stage 0)", "rank 1 (stage 1)"]);
    let threads: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == 0)
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(threads, vec!["compute", "pp-send", "pp-recv"]);
    let x: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    // Alloc and free are shown on the counter track, not as slices (and are no events of the
    // engine's: it replays them).
    assert_eq!(x.len() as u64, r.events);
    assert_eq!(r.trace.as_ref().unwrap().events.len() as u64, s.total_ops());
    let first_fwd = x
        .iter()
        .find(|e| e["pid"] == 0 && e["name"] == "fwd mb0")
        .unwrap();
    assert_eq!(first_fwd["ts"].as_f64().unwrap(), 0.0);
    assert_eq!(first_fwd["dur"].as_f64().unwrap(), 1.5);
    assert_eq!(first_fwd["args"]["flops"], 1500);
    let counters = evs.iter().filter(|e| e["ph"] == "C").count();
    assert_eq!(counters, 2 * 2 * 2);
    // An allocation that takes time (the host writes every byte) gets its slice; a free
    // never does.
    let mut priced = r.trace.clone().unwrap();
    let mut stretched = 0;
    for e in &mut priced.events {
        if matches!(
            s.get_op(e.rank, e.op).map(|o| &o.kind),
            Some(OpKind::Alloc { .. } | OpKind::Free { .. })
        ) {
            e.end_ns = e.start_ns + 7;
            stretched += 1;
        }
    }
    assert_eq!(stretched, 2 * 2 * 2);
    let v: serde_json::Value = serde_json::from_str(&priced.to_chrome_json(&plan, &s)).unwrap();
    let x2: Vec<&serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(x2.len() as u64, r.events + 2 * 2);
    assert!(x2
        .iter()
        .any(|e| e["name"].as_str().unwrap().starts_with("alloc") && e["dur"] == 0.007));
    assert!(!x2
        .iter()
        .any(|e| e["name"].as_str().unwrap().starts_with("free")));
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "C" && e["args"]["activations"] == 200));
}

/// Programs compiled one by one as they are generated (recycling each program's op vector
/// for the next) simulate exactly as the generated schedule does, collapsed or not, and a
/// rank-dependent cost model is refused (it needs the IR).
#[test]
fn programs_compiled_as_generated_simulate_as_the_schedule() {
    for (tp, pp, dp, m) in [(2, 4, 2, 8), (1, 2, 4, 6), (2, 1, 2, 4), (1, 8, 1, 16)] {
        let mut s = small_scenario(tp, pp, dp, m);
        s.parallel.zero = 1;
        let plan = crate::plan::Plan::new(&s).unwrap();
        let cost = Analytic::new(&s);
        let schedule = crate::schedule::generate(&s, &plan).unwrap();
        for collapse in [false, true] {
            let opts = SimOptions {
                collapse,
                trace: true,
                ..SimOptions::default()
            };
            let want = simulate(&plan, &schedule, &cost, &opts).unwrap();
            let shape = Schedule {
                programs: Vec::new(),
                program_of: crate::schedule::program_of(&s, &plan),
            };
            let mut compiled =
                Compiled::new(&plan, &shape.program_of, plan.pp() as usize, &cost).unwrap();
            let sizes = crate::schedule::WorkloadSizes {
                scenario: &s,
                plan: &plan,
            };
            crate::schedule::generate_each(&s, &plan, &sizes, 0, |p| {
                let added = compiled.add(&p, &cost);
                crate::schedule::recycle_program(p);
                added.map_err(|_| crate::schedule::ScheduleError::TooLarge("compile".into()))
            })
            .unwrap();
            let got = simulate_compiled(&plan, &shape, compiled, &cost, None, &opts).unwrap();
            assert_eq!(
                got, want,
                "tp {tp} pp {pp} dp {dp} m {m} collapse {collapse}"
            );
        }
    }
    let s = small_scenario(2, 2, 2, 4);
    let plan = crate::plan::Plan::new(&s).unwrap();
    let program_of = crate::schedule::program_of(&s, &plan);
    assert!(Compiled::new(&plan, &program_of, 2, &FixedCost::default()).is_some());
    let straggler = FixedCost {
        straggler: Some((1, 2)),
        ..FixedCost::default()
    };
    assert!(Compiled::new(&plan, &program_of, 2, &straggler).is_none());
    // A map naming a program the run does not have.
    assert!(Compiled::new(&plan, &program_of, 1, &FixedCost::default()).is_none());
}

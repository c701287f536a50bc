use super::*;
use crate::plan::GroupKind;
use crate::schedule::Stream;
use crate::trace::TraceEvent;

/// The index of the first collective op of `rank`'s program.
fn first_collective(schedule: &Schedule, rank: u32) -> u32 {
    schedule
        .program(rank)
        .ops
        .iter()
        .position(|o| matches!(o.kind, OpKind::Collective { .. }))
        .expect("a collective op") as u32
}

fn call(rank: u32, op: u32, start_ns: u64, end_ns: u64) -> TraceEvent {
    TraceEvent {
        op,
        ..TraceEvent::span(rank, Stream::Tp, start_ns, end_ns)
    }
}

#[test]
fn a_call_meets_another_groups_call_on_its_core_and_not_its_own_groups() {
    // Tensor parallel 2 x pipeline 2: four ranks on one node, two tensor-parallel groups.
    let p = super::super::tests::predicted_layout(2, 2, 1, 0);
    let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
    let tp = |r| plan.group_of(r, GroupKind::Tp);
    assert_eq!(tp(0), tp(1));
    assert_eq!(tp(2), tp(3));
    assert_ne!(tp(0), tp(2));
    // Two cores: ranks 0 and 2 on core 0, 1 and 3 on core 1.
    assert_eq!((plan.core_of(2, 0), plan.core_of(2, 2)), (0, 0));
    assert_eq!((plan.core_of(2, 1), plan.core_of(2, 3)), (1, 1));
    let c = |r| first_collective(schedule, r);
    let trace = Trace {
        events: vec![
            // Group 0's call on both cores over [0, 100).
            call(0, c(0), 0, 100),
            call(1, c(1), 0, 100),
            // Group 1's call on core 0 over [90, 150): it meets rank 0's call there.
            call(2, c(2), 90, 150),
            // Its member on core 1 starts when rank 1's call ended: no meeting.
            call(3, c(3), 100, 160),
            // A compute op of rank 2 over rank 0's call: not a collective.
            TraceEvent::span(2, Stream::Compute, 0, 100),
            // A zero-length call is not counted.
            call(3, c(3), 500, 500),
        ],
        memory: Vec::new(),
    };
    let m = collective_meetings(plan, schedule, &trace, 2);
    assert_eq!((m.calls, m.meeting_calls), (4, 2));
    assert!((m.meeting_s - 160e-9).abs() < 1e-15, "{m:?}");
    assert!((m.meeting_mean_s - 80e-9).abs() < 1e-15, "{m:?}");
    assert!((m.alone_mean_s - 80e-9).abs() < 1e-15, "{m:?}");
    // A core per rank: nothing meets.
    let own = collective_meetings(plan, schedule, &trace, 4);
    assert_eq!((own.calls, own.meeting_calls), (4, 0));
    assert_eq!(own.meeting_mean_s, 0.0);
    // One core for all four: rank 1's call meets rank 2's as well; rank 3's starts as rank
    // 0's and rank 1's end, and its own group's call is no meeting.
    let one = collective_meetings(plan, schedule, &trace, 1);
    assert_eq!(one.meeting_calls, 3);
}

#[test]
fn the_text_has_a_line_per_side_and_nothing_without_collectives() {
    let both = CollectiveMeetingsBoth {
        predicted: CollectiveMeetings {
            calls: 136,
            alone_mean_s: 42e-6,
            ..Default::default()
        },
        measured: CollectiveMeetings {
            calls: 136,
            meeting_calls: 17,
            meeting_s: 1.82e-3,
            meeting_mean_s: 107e-6,
            alone_mean_s: 34e-6,
        },
    };
    let t = both.to_text();
    assert!(t.contains("measured  17 of 136 calls met another group's on a core, 107 us each (1.82 ms in all); alone 34 us each"), "{t}");
    assert!(t.contains("predicted 0 of 136 calls"), "{t}");
    assert_eq!(CollectiveMeetingsBoth::default().to_text(), "");
}

#[test]
fn a_predicted_step_without_shared_cores_has_no_meetings() {
    // Data parallel 2 on one node: one group, so no call can meet another group's.
    let p = super::super::tests::predicted_layout(1, 1, 2, 0);
    let t = p.result.trace.as_ref().expect("a trace");
    let m = collective_meetings(&p.staged.plan, &p.staged.schedule, t, 1);
    assert!(m.calls > 0, "{m:?}");
    assert_eq!(m.meeting_calls, 0);
    assert!(m.alone_mean_s > 0.0);
}

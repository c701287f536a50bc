//! Tests of merging the ranks' measurements: op spans into a trace, busy / exposed / idle
//! accounts, run-delay waits and step times. Split from `launch::measure` so that the merge
//! reads on its own.

use super::*;

#[test]
fn union_merges_overlaps() {
    assert_eq!(union_ns(&mut [(0, 10), (5, 15), (20, 25)]), 20);
    assert_eq!(union_ns(&mut []), 0);
    assert_eq!(union_ns(&mut [(3, 4), (0, 10)]), 10);
}

fn staged_pp2() -> crate::testkit::Planned {
    crate::testkit::planned(&twin_sim::testing::cpu_sized_scenario(1, 2, 1, 2))
}

#[test]
fn merge_keeps_every_op_once_rebased_and_partitions_the_step() {
    let st = staged_pp2();
    // Rank r's op i runs at [1000 + 100 r + 10 i, +5]: a clock that starts at 1000.
    let ranks: Vec<RankMeasure> = (0..2u32)
        .map(|r| RankMeasure {
            rank: r,
            op_times_ns: (0..st.schedule.program(r).ops.len() as u64)
                .map(|i| {
                    let s = 1000 + 100 * u64::from(r) + 10 * i;
                    [s, s + 5]
                })
                .collect(),
            step_spans_ns: vec![[0, 50], [1000, 2000]],
            ..RankMeasure::default()
        })
        .collect();
    let m = merge(&st.plan, &st.schedule, &ranks);
    let trace = m.result.trace.as_ref().unwrap();
    assert_eq!(trace.events.len() as u64, st.schedule.total_ops());
    let ids: std::collections::BTreeSet<(u32, u32)> =
        trace.events.iter().map(|e| (e.rank, e.op)).collect();
    assert_eq!(ids.len() as u64, st.schedule.total_ops());
    assert_eq!(trace.events.iter().map(|e| e.start_ns).min(), Some(0));
    let last1 = st.schedule.program(1).ops.len() as u64 - 1;
    assert_eq!(m.result.step_time_ns, 100 + 10 * last1 + 5);
    for r in &m.result.ranks {
        assert_eq!(
            r.compute_busy_ns + r.comm_exposed_ns + r.idle_ns,
            m.result.step_time_ns
        );
    }
    assert_eq!(m.step_times_ns, vec![50, 1000]);
}

#[test]
fn exposed_is_communication_outside_compute() {
    let st = staged_pp2();
    let ops = &st.schedule.program(0).ops;
    let compute = ops
        .iter()
        .position(|o| matches!(o.kind, OpKind::Compute(_)))
        .unwrap();
    let comm = ops.iter().position(is_comm).unwrap();
    // Only these two ops take time: compute [0, 10], communication [5, 20].
    let mut times = vec![[0u64, 0u64]; ops.len()];
    times[compute] = [0, 10];
    times[comm] = [5, 20];
    let m = merge(
        &st.plan,
        &st.schedule,
        &[RankMeasure {
            rank: 0,
            op_times_ns: times,
            ..RankMeasure::default()
        }],
    );
    let r = &m.result.ranks[0];
    assert_eq!(
        (r.compute_busy_ns, r.comm_exposed_ns, r.idle_ns),
        (10, 10, 0)
    );
}

#[test]
fn the_part_of_an_ops_span_spent_waiting_for_a_core_is_idle() {
    let st = staged_pp2();
    let ops = &st.schedule.program(0).ops;
    let compute = ops
        .iter()
        .position(|o| matches!(o.kind, OpKind::Compute(_)))
        .unwrap();
    // One compute op of 100 ns that waited 30 of them for its core.
    let mut times = vec![[0u64, 0u64]; ops.len()];
    times[compute] = [0, 100];
    let mut wait = vec![None; ops.len()];
    wait[compute] = Some(30);
    let rank = RankMeasure {
        rank: 0,
        op_times_ns: times.clone(),
        op_wait_ns: wait.clone(),
        ..RankMeasure::default()
    };
    // The merged accounts, and the compute op's solo time in the trace.
    let merged = |r: &RankMeasure| {
        let m = merge(&st.plan, &st.schedule, std::slice::from_ref(r));
        let a = &m.result.ranks[0];
        let accounts = (a.compute_busy_ns, a.comm_exposed_ns, a.idle_ns);
        let events = &m.result.trace.as_ref().unwrap().events;
        let solo = events
            .iter()
            .find(|e| e.op == compute as u32)
            .unwrap()
            .solo_ns;
        (accounts, solo)
    };
    assert_eq!(merged(&rank), ((70, 0, 30), Some(70)));
    // No wait: nothing moves, and the event has no solo time.
    wait[compute] = Some(0);
    let rank = RankMeasure {
        op_wait_ns: wait,
        ..rank
    };
    assert_eq!(merged(&rank), ((100, 0, 0), None));
}

#[test]
fn the_step_shown_is_the_median_span_after_warm_up_on_every_rank() {
    // Two ranks, 5 steps; step k's op times are [k, k] on rank 0, [10 k, 10 k] on rank 1.
    // Spans over both ranks: 30, 10, 50, 20, 40 (rank 1 ends latest in steps 0 and 2).
    let spans = [[0, 30], [100, 110], [200, 250], [300, 320], [400, 440]];
    let mk = |rank: u32, scale: u64, kept: usize| RankMeasure {
        rank,
        op_times_ns: vec![[4 * scale, 4 * scale]],
        recent_op_times_ns: (5 - kept as u64..5)
            .map(|k| vec![[k * scale, k * scale]])
            .collect(),
        step_spans_ns: spans
            .iter()
            .map(|s| if rank == 0 { [s[0], s[0] + 1] } else { *s })
            .collect(),
        ..RankMeasure::default()
    };
    let mut ranks = vec![mk(0, 1, 5), mk(1, 10, 5)];
    // Warm-up 1: spans 10, 50, 20, 40 => lower median 20 = step 3.
    assert_eq!(select_step(&mut ranks, 1), Some(3));
    assert_eq!(ranks[0].op_times_ns, vec![[3, 3]]);
    assert_eq!(ranks[1].op_times_ns, vec![[30, 30]]);
    // Only the last two steps kept by rank 1: steps 3 and 4 (20, 40) => step 3.
    let mut ranks = vec![mk(0, 1, 5), mk(1, 10, 2)];
    assert_eq!(select_step(&mut ranks, 0), Some(3));
    // Nothing kept (a worker that does not keep them) or all warm-up: unchanged.
    let mut ranks = vec![mk(0, 1, 0), mk(1, 10, 0)];
    assert_eq!(select_step(&mut ranks, 0), None);
    assert_eq!(ranks[1].op_times_ns, vec![[40, 40]]);
    let mut ranks = vec![mk(0, 1, 5)];
    assert_eq!(select_step(&mut ranks, 5), None);
    assert_eq!(select_step(&mut [], 0), None);
}

#[test]
fn issue_times_follow_the_step_shown_and_are_rebased_into_the_trace() {
    let st = staged_pp2();
    let n = st.schedule.program(0).ops.len();
    // Three kept steps; step k runs op i at [1000 k + 10 i, +5], issued 2 ns before.
    let times = |k: u64| -> Vec<[u64; 2]> {
        (0..n as u64)
            .map(|i| [1000 * k + 10 * i + 2, 1000 * k + 10 * i + 7])
            .collect()
    };
    let issued =
        |k: u64| -> Vec<Option<u64>> { (0..n as u64).map(|i| Some(1000 * k + 10 * i)).collect() };
    let mut r = RankMeasure {
        rank: 0,
        op_times_ns: times(2),
        recent_op_times_ns: (0..3).map(times).collect(),
        op_issued_ns: issued(2),
        recent_op_issued_ns: (0..3).map(issued).collect(),
        // Spans 30, 10, 50: the median is step 0.
        step_spans_ns: vec![[0, 30], [1000, 1010], [2000, 2050]],
        ..RankMeasure::default()
    };
    let mut ranks = [r.clone()];
    assert_eq!(select_step(&mut ranks, 0), Some(0));
    assert_eq!(ranks[0].op_issued_ns, issued(0));
    let m = merge(&st.plan, &st.schedule, &ranks);
    let trace = m.result.trace.unwrap();
    // Rebased with the op times (the step starts at 2): op i was issued at 10 i - 2, clamped
    // to the step's start (0) and to the op's own start.
    for e in &trace.events {
        let want = (10 * u64::from(e.op)).saturating_sub(2).min(e.start_ns);
        assert_eq!(e.issued_ns, Some(want), "op {}", e.op);
        assert!(e.issued_ns.unwrap() <= e.start_ns);
    }
    // Issue times kept for fewer steps than the op times (a mismatched worker): dropped,
    // never paired with another step's op times.
    r.recent_op_issued_ns.pop();
    let mut ranks = [r];
    select_step(&mut ranks, 0);
    assert!(ranks[0].op_issued_ns.is_empty());
    let m = merge(&st.plan, &st.schedule, &ranks);
    assert!(m
        .result
        .trace
        .unwrap()
        .events
        .iter()
        .all(|e| e.issued_ns.is_none()));
}

#[test]
fn gaps_are_quantiles() {
    let g = gap_stats(vec![5, 1, 3, 2, 4]);
    assert_eq!((g.count, g.median_ns, g.max_ns), (5, 3, 5));
    assert_eq!(gap_stats(vec![]).count, 0);
}

/// What a rank's backend noted about what it ran (a fallback to per-tensor FP8 scales, say)
/// reaches the measured report once, marked as the measurement's, however many ranks noted it.
#[test]
fn the_backends_notes_reach_the_report_once_each() {
    let scenario = twin_sim::testing::cpu_sized_scenario(1, 2, 1, 2);
    let st = crate::testkit::planned(&scenario);
    let fallback =
        "cuBLASLt has no FP8 kernel with 128x128 x 1x128 scales: it ran with per-tensor scales";
    let ranks: Vec<RankMeasure> = (0..2u32)
        .map(|r| RankMeasure {
            rank: r,
            op_times_ns: (0..st.schedule.program(r).ops.len() as u64)
                .map(|i| [10 * i, 10 * i + 5])
                .collect(),
            step_spans_ns: vec![[0, 1000]],
            notes: vec![fallback.to_string(), format!("rank {r} only")],
            ..RankMeasure::default()
        })
        .collect();
    let merged = merge(&st.plan, &st.schedule, &ranks);
    let r = report(
        &scenario,
        &st.plan,
        &st.schedule,
        &ranks,
        &merged,
        0.1,
        Vec::new(),
    );
    let ours: Vec<&String> = r
        .report
        .notes
        .iter()
        .filter(|n| n.starts_with("measured: "))
        .collect();
    assert_eq!(
        ours,
        [
            &format!("measured: {fallback}"),
            &"measured: rank 0 only".to_string(),
            &"measured: rank 1 only".to_string()
        ]
    );
    assert!(r
        .to_text()
        .contains(&format!("note            measured: {fallback}")));
    assert!(r.to_json().contains("it ran with per-tensor scales"));
}

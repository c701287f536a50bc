//! Tests of memory-bound compute sharing the machine's memory (`[host] memory_cores`): an op
//! without GEMMs crosses its node's memory, which serves that many cores' worth of such work
//! at once (`Flows::start_compute`).

use super::testkit::*;
use super::*;

/// Each of `ranks` runs one memory-bound op of `bytes` (and, with `gemm_ns`, rank 1 a GEMM
/// op of that length instead).
fn programs(ranks: u32, bytes: u64, gemm_ns: Option<u64>) -> Vec<Program> {
    (0..ranks)
        .map(|r| {
            let mut b = ProgBuilder::new(0);
            match gemm_ns {
                Some(ns) if r == 1 => b.fwd(ns, &[]),
                _ => b.optimizer(bytes, &[]),
            };
            b.build()
        })
        .collect()
}

fn result(plan: &Plan, progs: Vec<Program>, cores: u32, memory_cores: Option<f64>) -> SimResult {
    let cost = SharedCores {
        cores: Some(cores),
        memory_cores,
        ..SharedCores::default()
    };
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    simulate(plan, &per_rank(progs), &cost, &opts).unwrap()
}

#[test]
fn memory_bound_ops_on_two_cores_share_the_memory() {
    let plan = plan(1, 1, 2, 1);
    // Two optimizers of 1000 ns solo on two cores; the memory serves 1.6 cores' worth: each
    // runs at 0.8, 1250 ns.
    assert_eq!(
        result(&plan, programs(2, 1000, None), 2, Some(1.6)).step_time_ns,
        1250
    );
    // Without the key, each core has its own.
    assert_eq!(
        result(&plan, programs(2, 1000, None), 2, None).step_time_ns,
        1000
    );
    // Two cores' worth: no slowdown.
    assert_eq!(
        result(&plan, programs(2, 1000, None), 2, Some(2.0)).step_time_ns,
        1000
    );
    // A GEMM op beside it does not stream memory: neither is slowed.
    assert_eq!(
        result(&plan, programs(2, 1000, Some(1000)), 2, Some(1.0)).step_time_ns,
        1000
    );
    // One core's worth: the two take as long as one after the other.
    assert_eq!(
        result(&plan, programs(2, 1000, None), 2, Some(1.0)).step_time_ns,
        2000
    );
}

#[test]
fn one_op_alone_and_ops_taking_turns_are_not_slowed() {
    // One rank: its optimizer alone runs at full speed whatever the memory serves.
    let one = plan(1, 1, 1, 1);
    assert_eq!(
        result(&one, programs(1, 1000, None), 1, Some(1.0)).step_time_ns,
        1000
    );
    // Two ranks on one core take turns: one optimizer at a time, 1000 ns each.
    let two = plan(1, 1, 2, 1);
    assert_eq!(
        result(&two, programs(2, 1000, None), 1, Some(1.0)).step_time_ns,
        2000
    );
}

#[test]
fn time_lost_to_the_memory_is_work_not_waiting_for_the_core() {
    // The slowed optimizers are busy the whole 1250 ns: the trace gives them no solo time
    // (what `verify` takes as the core's waiting) and the report counts no idle time.
    let plan = plan(1, 1, 2, 1);
    let r = result(&plan, programs(2, 1000, None), 2, Some(1.6));
    let trace = r.trace.as_ref().unwrap();
    assert_eq!(trace.events.len(), 2);
    for e in &trace.events {
        assert_eq!(e.end_ns - e.start_ns, 1250);
        assert_eq!(e.solo_ns, None);
    }
    assert_eq!(r.bubble_fraction(), 0.0);
}

#[test]
fn an_op_that_lost_its_core_counts_only_that_as_waiting() {
    // Each of two ranks runs an optimizer of 1000 ns solo and, on its own core at the same
    // time, its side of an all-reduce of 500 ns of CPU work, at equal weight. For 1000 ns
    // each core is shared half and half (the memory, 1.6 cores' worth, is not what limits
    // them: 2 x 0.5 < 1.6); then the optimizers have their cores and share the memory at 0.8
    // each for their last 500 ns of work: 625 ns. Their own time is 500 + 625 = 1125 ns: the
    // 500 ns the all-reduce had of their cores is waiting, the memory's 125 ns is work.
    let plan = plan(1, 1, 2, 1);
    let progs: Vec<Program> = (0..2)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            b.optimizer(1000, &[]);
            b.collective(
                crate::schedule::Stream::Dp,
                crate::schedule::CollectiveKind::AllReduce,
                crate::plan::GroupKind::Dp,
                500,
                &[],
            );
            b.build()
        })
        .collect();
    let cost = |memory_cores| SharedCores {
        cores: Some(2),
        compute_weight: Some(1.0),
        memory_cores,
        ..SharedCores::default()
    };
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let s = per_rank(progs);
    let optimizers = |r: &SimResult| -> Vec<(u64, Option<u64>)> {
        r.trace
            .as_ref()
            .unwrap()
            .events
            .iter()
            .filter(|e| e.stream == crate::schedule::Stream::Compute)
            .map(|e| (e.end_ns - e.start_ns, e.solo_ns))
            .collect()
    };
    let shared = simulate(&plan, &s, &cost(Some(1.6)), &opts).unwrap();
    assert_eq!(shared.step_time_ns, 1625);
    assert_eq!(optimizers(&shared), vec![(1625, Some(1125)); 2]);
    // Without the memory key: 1000 ns shared, then 500 alone.
    let own = simulate(&plan, &s, &cost(None), &opts).unwrap();
    assert_eq!(own.step_time_ns, 1500);
    assert_eq!(optimizers(&own), vec![(1500, Some(1000)); 2]);
}

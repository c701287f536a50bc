//! The engine's use of operand residency (`host_model::residency`): which compute ops pay to
//! reload operands that other work pushed out of their core's cache, end to end through a
//! simulated step. The cost model here ([`SharedCores`] with `residency`) reads an op's
//! working set off its `memory_bytes`.

use super::testkit::*;
use super::*;
use crate::schedule::{OpKind, Program};

const CACHE_BYTES: u64 = 1000;
const RELOAD_NS: u64 = 100;

/// One program of 100 ns compute ops in a chain, with these working sets.
fn chain(working_sets: &[u64]) -> Program {
    let mut b = ProgBuilder::new(0);
    let mut last: Option<u32> = None;
    for _ in working_sets {
        let deps: Vec<u32> = last.into_iter().collect();
        last = Some(b.fwd(100, &deps));
    }
    let mut p = b.build();
    for (op, &ws) in p.ops.iter_mut().zip(working_sets) {
        if let OpKind::Compute(c) = &mut op.kind {
            c.memory_bytes = ws;
        }
    }
    p
}

/// Each op's (start, end) per rank, on `cores` shared cores (`None`: a device per rank).
fn spans(plan: &Plan, progs: Vec<Program>, cores: Option<u32>, on: bool) -> Vec<Vec<(u64, u64)>> {
    let cost = SharedCores {
        cores,
        residency: on.then_some((CACHE_BYTES, RELOAD_NS)),
        ..SharedCores::default()
    };
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let r = simulate(plan, &per_rank(progs), &cost, &opts).unwrap();
    let trace = r.trace.unwrap();
    (0..plan.world)
        .map(|rank| {
            let mut v: Vec<_> = trace
                .events
                .iter()
                .filter(|e| e.rank == rank)
                .map(|e| (e.op, e.start_ns, e.end_ns))
                .collect();
            v.sort();
            v.into_iter().map(|(_, s, e)| (s, e)).collect()
        })
        .collect()
}

fn durations(s: &[(u64, u64)]) -> Vec<u64> {
    s.iter().map(|(a, b)| b - a).collect()
}

#[test]
fn a_steps_first_op_reloads_what_the_last_op_of_the_step_streamed_out() {
    // Two small ops then an optimizer-sized one: the step starts after the optimizer, so the
    // first op reloads everything; the second follows a small op of its rank and is warm; the
    // optimizer loads its operands anyway.
    let plan = plan(1, 1, 1, 1);
    let on = spans(&plan, vec![chain(&[500, 500, 5000])], Some(1), true);
    assert_eq!(durations(&on[0]), vec![100 + RELOAD_NS, 100, 100]);
    // Off (GPU profiles): every op as priced.
    let off = spans(&plan, vec![chain(&[500, 500, 5000])], Some(1), false);
    assert_eq!(durations(&off[0]), vec![100, 100, 100]);
    // A step that ends with a small op starts warm.
    let warm = spans(&plan, vec![chain(&[500, 500])], Some(1), true);
    assert_eq!(durations(&warm[0]), vec![100, 100]);
    // The same with a device per rank.
    let own = spans(&plan, vec![chain(&[500, 500, 5000])], None, true);
    assert_eq!(durations(&own[0]), vec![100 + RELOAD_NS, 100, 100]);
}

#[test]
fn ranks_taking_turns_on_a_core_evict_each_other_by_what_they_exceed_the_cache_by() {
    // Two ranks, one op each, on one core: the second to run finds the first's working set
    // beside its own. 700 + 700 bytes exceed the cache by 400 of its 700: 4/7 reloaded.
    let plan = plan(1, 1, 2, 1);
    let s = spans(&plan, vec![chain(&[700]), chain(&[700])], Some(1), true);
    let mut d: Vec<u64> = s.iter().flat_map(|r| durations(r)).collect();
    d.sort();
    assert_eq!(d, vec![100, 100 + (RELOAD_NS * 4 + 3) / 7]);
    // Working sets that fit together: no reload.
    let s = spans(&plan, vec![chain(&[400]), chain(&[400])], Some(1), true);
    assert!(s.iter().flat_map(|r| durations(r)).all(|d| d == 100));
    // On two cores neither sees the other's.
    let s = spans(&plan, vec![chain(&[700]), chain(&[700])], Some(2), true);
    assert!(s.iter().flat_map(|r| durations(r)).all(|d| d == 100));
}

//! Tests of the host model's CPU sharing beyond compute: on the host backend a transfer and a
//! priced allocation are CPU work of the ranks involved, so they share the node's cores with
//! compute (`Flows::start_cpu_work`).

use super::testkit::*;
use super::*;
use crate::plan::GroupKind;
use crate::schedule::{CollectiveKind, MemCategory, Stream};

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

#[test]
fn a_collective_takes_a_core_of_every_member() {
    // Four data-parallel ranks on one node all-reduce for 1000 ns of solo time.
    let plan = plan(1, 1, 4, 1);
    let progs = (0..4)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            b.collective(
                Stream::Dp,
                CollectiveKind::AllReduce,
                GroupKind::Dp,
                1000,
                &[],
            );
            b.build()
        })
        .collect();
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
    let mut r0 = ProgBuilder::new(0);
    r0.fwd(1000, &[]);
    r0.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        1000,
        &[],
    );
    let mut r1 = ProgBuilder::new(0);
    r1.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        1000,
        &[],
    );
    let s = per_rank(vec![r0.build(), r1.build()]);
    assert_eq!(step(&plan, &s, None), 1000);
    assert_eq!(step(&plan, &s, Some(2)), 2000);
    // A third core does not help: the work is bound to rank 0's core.
    assert_eq!(step(&plan, &s, Some(3)), 2000);
}

#[test]
fn priced_allocations_take_cpu_time() {
    // Two ranks each allocate (and, on the host, write) 1000 bytes at 1 ns per byte.
    let plan = plan(1, 1, 2, 1);
    let progs = (0..2)
        .map(|_| {
            let mut b = ProgBuilder::new(0);
            let a = b.alloc(MemCategory::Activations, 1000, 1, &[]);
            b.free(1, &[a]);
            b.build()
        })
        .collect();
    let s = per_rank(progs);
    assert_eq!(step(&plan, &s, None), 1000);
    assert_eq!(step(&plan, &s, Some(2)), 1000);
    assert_eq!(step(&plan, &s, Some(1)), 2000);
}

//! Host issue (`CostModel::host_issue_ns`): an eager host issues each kernel in `h` ns of CPU,
//! in program order from the step's start, and the GPU runs nothing before it is issued.
//! Hand-computed times on one rank with `h` = 10 ns.

use super::testkit::*;
use super::*;
use crate::plan::Group;
use crate::schedule::{CollectiveKind, ComputeOp, OpKind, Phase, Stream};

/// Compute takes `flops` ns; the host spends `host_ns` per kernel.
struct HostCost {
    host_ns: u64,
}

impl crate::cost::CostModel for HostCost {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        op.flops
    }
    fn collective_ns(&self, _k: CollectiveKind, _g: &Group, bytes: u64, calls: u32) -> u64 {
        bytes * u64::from(calls)
    }
    fn p2p_ns(&self, _plan: &Plan, _src: u32, _dst: u32, bytes: u64) -> u64 {
        bytes
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        bytes
    }
    fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
        work.bytes()
    }
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
    fn host_issue_ns(&self) -> u64 {
        self.host_ns
    }
}

/// A chain of compute ops of (ns, kernels) on one rank, each after the one before.
fn chain(ops: &[(u64, u32)]) -> Schedule {
    let synced: Vec<_> = ops.iter().map(|&(ns, k)| (ns, k, 0, 0)).collect();
    chain_synced(&synced)
}

/// A chain as [`chain`], with host synchronisations: (ns, kernels, syncs, kernels after them).
fn chain_synced(ops: &[(u64, u32, u32, u32)]) -> Schedule {
    let mut b = ProgBuilder::new(0);
    let mut prev: Vec<u32> = vec![];
    for &(ns, kernels, count, tail_kernels) in ops {
        let op = ComputeOp {
            kernels,
            host_syncs: crate::ir::HostSyncs {
                count,
                tail_kernels,
            },
            ..compute_op(Phase::Forward, ns)
        };
        let i = b.op(
            Stream::Compute,
            OpKind::Compute(op),
            &prev,
            Default::default(),
        );
        prev = vec![i];
    }
    per_rank(vec![b.build()])
}

/// End of each op, and the step.
fn ends(s: &Schedule, host_ns: u64) -> (Vec<u64>, u64) {
    let r = simulate(
        &plan(1, 1, 1, 1),
        s,
        &HostCost { host_ns },
        &SimOptions {
            trace: true,
            ..SimOptions::default()
        },
    )
    .unwrap();
    let mut ev: Vec<_> = r
        .trace
        .unwrap()
        .events
        .iter()
        .map(|e| (e.op, e.end_ns))
        .collect();
    ev.sort_unstable();
    (ev.into_iter().map(|(_, e)| e).collect(), r.step_time_ns)
}

#[test]
fn short_kernels_are_host_bound() {
    // Three ops of 4 kernels of 5 ns: the host needs 40 ns per op, the GPU 20.
    // op 0: issued over 0..40: ends at max(10 + 20, 40 + 5) = 45.
    // op 1: issued over 40..80: ends at max(max(45, 50) + 20, 80 + 5) = 85.
    // op 2: issued over 80..120: ends at max(max(85, 90) + 20, 120 + 5) = 125.
    let s = chain(&[(20, 4), (20, 4), (20, 4)]);
    assert_eq!(ends(&s, 10), (vec![45, 85, 125], 125));
    // Without a host cost the GPU runs them back to back.
    assert_eq!(ends(&s, 0), (vec![20, 40, 60], 60));
}

#[test]
fn long_kernels_hide_the_host() {
    // Kernels of 100 ns: only the first kernel's issue (10 ns) is exposed.
    // op 0: max(10 + 400, 40 + 100) = 410; op 1: max(410 + 400, 80 + 100) = 810; op 2: 1210.
    let s = chain(&[(400, 4), (400, 4), (400, 4)]);
    assert_eq!(ends(&s, 10), (vec![410, 810, 1210], 1210));
}

#[test]
fn the_host_runs_ahead_through_long_kernels() {
    // One 1000 ns kernel, then 50 kernels of 2 ns, then 100 kernels of 2 ns.
    // op 0: issued at 10, ends at 1010.
    // op 1: issued over 10..510, long before the GPU gets to it: 1010 + 100 = 1110 (an
    //       additive 10 ns per kernel would have made it 1610).
    // op 2: issued over 510..1510: the host is the floor again, 1510 + 2 = 1512.
    let s = chain(&[(1000, 1), (100, 50), (200, 100)]);
    assert_eq!(ends(&s, 10), (vec![1010, 1110, 1512], 1512));
}

#[test]
fn ops_without_kernels_wait_for_no_host() {
    // A 0-kernel op (bookkeeping) costs the host nothing and is not held back; the next op's
    // kernels are issued after the first op's 2: 20..30, so it ends at max(30 + 5, 30 + 5).
    let s = chain(&[(10, 2), (7, 0), (5, 1)]);
    // op 0: max(10 + 10, 20 + 5) = 25; op 1: 25 + 7 = 32; op 2: max(max(32, 30) + 5, 30 + 5).
    assert_eq!(ends(&s, 10), (vec![25, 32, 37], 37));
}

#[test]
fn a_synchronisation_stops_the_host_running_ahead() {
    // One 1000 ns kernel, then two ops of 10 kernels of 10 ns; the first synchronises after
    // its 4th kernel (6 after it).
    // op 0: issued at 10, ends at 1010; the host is at 10.
    // op 1: its 4 kernels issued over 10..50 run 1010..1050; the host waits for them (1050),
    //       issues the 5th at 1060, and the GPU runs the 6 from there: 1120. Host at 1110.
    // op 2: issued over 1110..1210, the host the floor: 1210 + 10 = 1220.
    let s = chain_synced(&[(1000, 1, 0, 0), (100, 10, 1, 6), (100, 10, 0, 0)]);
    assert_eq!(ends(&s, 10), (vec![1010, 1120, 1220], 1220));
    // Without it the host stays 1000 ns ahead, as without host time at all.
    let free = chain_synced(&[(1000, 1, 0, 0), (100, 10, 0, 0), (100, 10, 0, 0)]);
    assert_eq!(ends(&free, 10), (vec![1010, 1110, 1210], 1210));
    // Without host time it costs nothing.
    assert_eq!(ends(&s, 0), (vec![1000, 1100, 1200], 1200));
    assert_eq!(ends(&s, 0), ends(&free, 0));
}

#[test]
fn an_op_synchronises_once_per_round() {
    // 20 kernels of 10 ns in two rounds (two MoE layers): 4 kernels, a synchronisation, 6.
    // Round 0: 4 issued over 0..40 run 10..50; wait to 50; 6 issued 50..110 run 60..120.
    // Round 1: 4 issued 110..150 run 120..160; wait to 160; 6 issued 160..220 run 170..230.
    let s = chain_synced(&[(200, 20, 2, 12)]);
    assert_eq!(ends(&s, 10), (vec![230], 230));
    // Unsynchronised the host is 10 ns ahead throughout: max(10 + 200, 200 + 10).
    assert_eq!(
        ends(&chain_synced(&[(200, 20, 0, 0)]), 10),
        (vec![210], 210)
    );
}

#[test]
fn long_kernels_hide_a_synchronisation_but_its_first_issue() {
    // Kernels of 100 ns: after the synchronisation the GPU waits only for the first kernel's
    // issue (10 ns), and the host is ahead again by the next one.
    // 2 kernels run 10..210; wait to 210; 2 issued 210..230 run 220..420.
    let s = chain_synced(&[(400, 4, 1, 2), (400, 4, 0, 0)]);
    // op 1: the host is at 230, ahead of the GPU: 420 + 400.
    assert_eq!(ends(&s, 10), (vec![420, 820], 820));
}

#[test]
fn more_synchronisations_than_kernels_count_once_per_kernel() {
    // 2 kernels of 10 ns with 1,000 synchronisations: as many rounds as kernels, each a
    // kernel issued at the host's pace after the GPU caught up (10 + 10, then 30 + 10).
    let many = chain_synced(&[(20, 2, 1_000, 0)]);
    let two = chain_synced(&[(20, 2, 2, 0)]);
    assert_eq!(ends(&many, 10), ends(&two, 10));
    assert_eq!(ends(&many, 10), (vec![40], 40));
}

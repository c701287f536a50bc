//! FSDP2's copies around its ZeRO-3 collectives (`overlaps.fsdp_copies`, torchtitan): the
//! compute stream copies each gather's output into the unit's parameters before the unit's
//! first pass (the gathered bytes read and written) and each reduction's gradients into the
//! reduce-scatter buffer (read in bf16, written in fp32) before it starts.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::ir::{CollectiveKind, Phase};
use twin_sim::plan::Plan;
use twin_sim::scenario::framework::Bundled;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{generate, OpKind, Schedule};
use twin_sim::testing::small_scenario;

/// ZeRO 3 over 2 GPUs under torchtitan's file, 2 micro batches; `copies` sets the key.
fn fsdp(copies: bool) -> Scenario {
    let mut s = small_scenario(1, 1, 2, 2);
    s.parallel.zero = 3;
    s.training.framework = Bundled::Torchtitan.framework().unwrap();
    assert!(s.training.framework.overlaps.fsdp_copies);
    s.training.framework.overlaps.fsdp_copies = copies;
    s
}

fn schedule(s: &Scenario) -> (Plan, Schedule) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    (plan, sched)
}

/// Every gather is followed by one copy that waits for it and moves twice its bytes (the
/// all-gather output read, the parameters written), and every reduction's reduce-scatter
/// calls wait for one copy that moves 1.5 times their fp32 bytes (bf16 gradients read, fp32
/// written); the pass
/// that first uses a gather waits for its copy. Without the key there is no copy.
#[test]
fn each_gather_and_reduction_has_its_copy_of_the_right_size() {
    let (_, sched) = schedule(&fsdp(true));
    let ops = &sched.programs[sched.program_of[0] as usize].ops;
    let (mut gathers, mut reductions, mut copies) = (0, 0, 0);
    for (i, op) in ops.iter().enumerate() {
        match &op.kind {
            OpKind::Collective {
                kind: CollectiveKind::AllGather,
                bytes,
                ..
            } => {
                gathers += 1;
                let copy: Vec<_> = ops
                    .iter()
                    .filter(|o| o.deps.contains(&(i as u32)))
                    .collect();
                assert_eq!(copy.len(), 1, "op {i}: one copy reads the gather");
                let OpKind::Compute(c) = &copy[0].kind else {
                    panic!("op {i}: its reader is no compute op")
                };
                assert_eq!(
                    (c.phase, c.memory_bytes, c.flops),
                    (Phase::Copy, 2 * bytes, 0)
                );
            }
            OpKind::Compute(c) if c.phase == Phase::Copy => {
                copies += 1;
                // A copy-in: the reduce-scatter calls that wait for it carry its gradients.
                let fp32: u64 = ops
                    .iter()
                    .filter(|o| o.deps.contains(&(i as u32)))
                    .filter_map(|o| match o.kind {
                        OpKind::Collective {
                            kind: CollectiveKind::ReduceScatter,
                            bytes,
                            calls,
                            ..
                        } => Some(bytes * u64::from(calls)),
                        _ => None,
                    })
                    .sum();
                if fp32 > 0 {
                    reductions += 1;
                    assert_eq!(2 * c.memory_bytes, 3 * fp32, "op {i}");
                }
            }
            _ => {}
        }
    }
    // 8 layers, each gathered for the forward and the backward of 2 micro batches, and each
    // micro batch's backward reduces every layer.
    assert_eq!(gathers, 8 * 4);
    assert_eq!(reductions, 8 * 2);
    assert_eq!(copies, gathers + reductions);
    let (_, plain) = schedule(&fsdp(false));
    let plain_ops = &plain.programs[plain.program_of[0] as usize].ops;
    assert!(!plain_ops
        .iter()
        .any(|o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Copy)));
    // One copy each, and one allocation and one free of the copy-out's second buffer.
    assert_eq!(plain_ops.len() + copies + 2 * gathers, ops.len());
}

/// The copies run on the compute stream between passes; with links fast enough that no pass
/// waits for a collective, the step grows by exactly their time.
#[test]
fn the_step_grows_by_exactly_the_copies() {
    let run = |copies: bool| {
        let mut s = fsdp(copies);
        for link in [&mut s.cluster.intra_node, &mut s.cluster.inter_node] {
            link.bandwidth_bytes_per_s *= 1e4;
            link.latency_ns = 0;
        }
        let (plan, sched) = schedule(&s);
        let cost = Analytic::new(&s);
        let res = simulate(&plan, &sched, &cost, &SimOptions::default()).unwrap();
        let copy_ns: u64 = sched.programs[sched.program_of[0] as usize]
            .ops
            .iter()
            .filter_map(|o| match &o.kind {
                OpKind::Compute(c) if c.phase == Phase::Copy => Some(cost.compute_ns(0, c)),
                _ => None,
            })
            .sum();
        (res.step_time_ns, copy_ns)
    };
    let (without, none) = run(false);
    let (with, copy_ns) = run(true);
    assert_eq!(none, 0);
    assert!(copy_ns > 0);
    assert_eq!(with - without, copy_ns);
}

/// While a gather's output is copied into the parameters both hold its bytes: each copy-out
/// allocates the gathered bytes (bf16 parameters, half what it moves) just before it, freed
/// by the first op after it, so a rank holds one more gathered unit while it copies.
#[test]
fn a_copy_out_holds_the_gathered_bytes_twice() {
    let (_, sched) = schedule(&fsdp(true));
    let ops = &sched.programs[sched.program_of[0] as usize].ops;
    let mut seen = 0;
    for (i, op) in ops.iter().enumerate() {
        let OpKind::Compute(c) = &op.kind else {
            continue;
        };
        let gathers = op.deps.iter().any(|&d| {
            matches!(
                ops[d as usize].kind,
                OpKind::Collective {
                    kind: CollectiveKind::AllGather,
                    ..
                }
            )
        });
        if c.phase != Phase::Copy || !gathers {
            continue;
        }
        seen += 1;
        let OpKind::Alloc { bytes, tag, .. } = ops[i - 1].kind else {
            panic!("op {i}: no allocation before the copy-out")
        };
        assert_eq!(2 * bytes, c.memory_bytes);
        let OpKind::Free { tag: freed } = ops[i + 1].kind else {
            panic!("op {i}: no free after the copy-out")
        };
        assert_eq!(freed, tag);
        assert_eq!(ops[i + 1].deps, vec![i as u32]);
        // The pass that first uses the gather waits for the copy.
        assert!(ops.iter().any(|o| o.deps.contains(&(i as u32))
            && matches!(&o.kind, OpKind::Compute(p) if p.phase != Phase::Copy)));
    }
    assert_eq!(seen, 8 * 4);
}

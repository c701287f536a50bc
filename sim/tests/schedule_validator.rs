//! The validator catches hand-broken schedules (missing receive, mismatched tag or bytes,
//! collective order swapped, dependency cycle, deadlock, backward before forward, leaked
//! allocation) with a message that names the rank and the op.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::plan::Plan;
use twin_sim::scenario::*;
use twin_sim::schedule::*;
use twin_sim::testing::small_scenario;

mod common;
use common::generate_uniform;

fn base() -> (Plan, Schedule) {
    let mut s = small_scenario(2, 3, 2, 4);
    s.training.recompute = Recompute::None;
    let (plan, sched) = generate_uniform(&s, 0);
    let sched = sched.unwrap();
    sched.validate(&plan).unwrap();
    (plan, sched)
}

fn find(prog: &Program, pred: impl Fn(&Op) -> bool) -> usize {
    prog.ops.iter().position(pred).expect("op present")
}

#[test]
fn missing_recv_is_named() {
    let (plan, mut sched) = base();
    let prog = &mut sched.programs[1];
    let i = find(prog, |o| matches!(o.kind, OpKind::Recv { .. }));
    prog.ops[i].kind = OpKind::Checkpoint { bytes: 0 };
    prog.ops[i].stream = Stream::Io;
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ValidationError::Unmatched { .. }), "{msg}");
    assert!(
        msg.contains("rank ") && msg.contains("send PpNext"),
        "{msg}"
    );
}

#[test]
fn mismatched_tag_is_named() {
    let (plan, mut sched) = base();
    let prog = &mut sched.programs[2];
    let i = find(prog, |o| matches!(o.kind, OpKind::Recv { .. }));
    if let OpKind::Recv { tag, .. } = &mut prog.ops[i].kind {
        *tag += 1000;
    }
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ValidationError::Unmatched { .. }), "{msg}");
    assert!(msg.contains("tag"), "{msg}");
}

#[test]
fn mismatched_bytes_are_named() {
    let (plan, mut sched) = base();
    let prog = &mut sched.programs[1];
    let i = find(prog, |o| matches!(o.kind, OpKind::Recv { .. }));
    if let OpKind::Recv { bytes, .. } = &mut prog.ops[i].kind {
        *bytes += 1;
    }
    let msg = sched.validate(&plan).unwrap_err().to_string();
    assert!(msg.contains("bytes") && msg.contains("rank 0"), "{msg}");
}

#[test]
fn swapped_collective_order_is_named() {
    let (plan, mut sched) = base();
    // Give rank 1 (stage 0, tp 1) its own copy of stage 0's program with two TP collectives
    // of different kinds swapped.
    let mut copy = sched.programs[0].clone();
    let tps: Vec<usize> = copy
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| {
            matches!(
                o.kind,
                OpKind::Collective {
                    group: twin_sim::plan::GroupKind::Tp,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect();
    let (a, b) = (tps[0], tps[1]);
    let ka = copy.ops[a].kind.clone();
    copy.ops[a].kind = copy.ops[b].kind.clone();
    copy.ops[b].kind = ka;
    assert_ne!(copy.ops[a].kind, copy.ops[b].kind);
    sched.programs.push(copy);
    sched.program_of[1] = (sched.programs.len() - 1) as u32;
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ValidationError::CollectiveOrder { .. }),
        "{msg}"
    );
    assert!(msg.contains("rank 0") && msg.contains("rank 1"), "{msg}");
    assert!(
        msg.contains("all-gather") || msg.contains("reduce-scatter"),
        "{msg}"
    );
}

/// DualPipe's sums of the two copies of a stage pair rank s with rank pp - 1 - s: the
/// validator matches their all-reduces over that group, and names a pair whose sums differ
/// (here rank 0's first carries one more gradient element than rank 3's).
#[test]
fn dualpipe_copies_sums_are_matched_per_pair() {
    use twin_sim::plan::GroupKind;
    let mut s = small_scenario(1, 4, 1, 8);
    s.model.layers = 16;
    s.parallel.schedule = PipelineSchedule::DualPipe;
    s.training.grad_bucket_bytes = u64::MAX;
    let (plan, sched) = generate_uniform(&s, 0);
    let mut sched = sched.unwrap();
    let report = sched.validate(&plan).unwrap();
    assert!(report.collectives > 0);
    let prog = &mut sched.programs[sched.program_of[0] as usize];
    let mirrors: Vec<usize> = prog
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| {
            matches!(
                o.kind,
                OpKind::Collective {
                    group: GroupKind::PpMirror,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(mirrors.len(), 2);
    if let OpKind::Collective { bytes, .. } = &mut prog.ops[mirrors[0]].kind {
        *bytes += 4;
    }
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            ValidationError::CollectiveOrder {
                kind: GroupKind::PpMirror,
                rank: 0,
                other: 3,
                ..
            }
        ),
        "{msg}"
    );
}

#[test]
fn forward_dependency_cycle_is_rejected() {
    let (plan, mut sched) = base();
    let prog = &mut sched.programs[0];
    let n = prog.ops.len() as u32;
    prog.ops[3].deps.push(n - 1);
    let msg = sched.validate(&plan).unwrap_err().to_string();
    assert!(msg.contains("op 3") && msg.contains("cycle"), "{msg}");
}

/// The schedule of [`deadlock_names_blocked_ranks_and_ops`]: stage 0's first two sends to
/// the next stage swapped.
fn deadlocked() -> (Plan, Schedule) {
    let (plan, mut sched) = base();
    // Stage 0 sends micro batch 1's activation before micro batch 0's: both tags exist, but
    // stage 1 waits for micro batch 0 first, so neither side can move.
    let prog = &mut sched.programs[0];
    let sends: Vec<usize> = prog
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| {
            matches!(
                o.kind,
                OpKind::Send {
                    peer: Peer::PpNext,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect();
    let (a, b) = (sends[0], sends[1]);
    let ka = prog.ops[a].kind.clone();
    prog.ops[a].kind = prog.ops[b].kind.clone();
    prog.ops[b].kind = ka;
    (plan, sched)
}

#[test]
fn deadlock_names_blocked_ranks_and_ops() {
    let (plan, sched) = deadlocked();
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    let ValidationError::Deadlock { blocked, .. } = &err else {
        panic!("expected a deadlock, got {msg}");
    };
    assert!(blocked.contains(&0), "{msg}");
    assert!(
        msg.contains("rank 0:") && msg.contains("pp-send at op"),
        "{msg}"
    );
    assert!(msg.contains("recv PpPrev"), "{msg}");
}

/// What `twin simulate --full` relies on to leave the dry run out before a run of every
/// rank: a schedule only the dry run rejects passes the other checks, and the engine, running
/// every rank, stops on it too (then the prediction validates fully, for the dry run's error).
#[test]
fn only_the_dry_run_and_the_engine_catch_a_deadlock() {
    use twin_sim::cost::{Analytic, CostModel};
    use twin_sim::engine::{simulate, SimError, SimOptions};
    let (plan, sched) = deadlocked();
    sched.validate_but_dry_run(&plan).unwrap();
    let s = {
        let mut s = small_scenario(2, 3, 2, 4);
        s.training.recompute = Recompute::None;
        s
    };
    let cost = Analytic::new(&s);
    let err = simulate(
        &plan,
        &sched,
        &cost as &dyn CostModel,
        &SimOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, SimError::Deadlock(_)), "{err}");
}

#[test]
fn backward_before_forward_is_named() {
    let (plan, mut sched) = base();
    // The last stage runs F0 B0 F1 B1 ...: relabel B0 as micro batch 1, whose forward comes
    // later.
    let prog = &mut sched.programs[2];
    let i = find(
        prog,
        |o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Backward),
    );
    prog.ops[i].label.microbatch = Some(1);
    let err = sched.validate(&plan).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ValidationError::BackwardBeforeForward { .. }),
        "{msg}"
    );
    assert!(msg.contains("rank 8") && msg.contains("bwd mb1"), "{msg}");
}

#[test]
fn unfreed_allocation_is_named() {
    let (plan, mut sched) = base();
    let prog = &mut sched.programs[0];
    let i = find(prog, |o| matches!(o.kind, OpKind::Free { .. }));
    prog.ops[i].kind = OpKind::Checkpoint { bytes: 0 };
    prog.ops[i].stream = Stream::Io;
    let msg = sched.validate(&plan).unwrap_err().to_string();
    assert!(
        msg.contains("never freed") && msg.contains("rank 0"),
        "{msg}"
    );
}

/// The per-program checks a collapsed run relies on find what one program shows on its own
/// (a cycle, a backward before its forward), name the first rank that runs it, and leave
/// matching across ranks to the full validation and the engine.
#[test]
fn per_program_checks_find_program_errors_and_leave_cross_rank_ones() {
    let (plan, sched) = base();
    let counted = sched.validate_programs(&plan).unwrap();
    assert_eq!(counted.ranks, plan.world);
    assert_eq!((counted.p2p_pairs, counted.collectives), (0, 0));
    assert_eq!(counted.ops, sched.total_ops());

    let mut cyclic = sched.clone();
    let n = cyclic.programs[0].ops.len() as u32;
    cyclic.programs[0].ops[3].deps.push(n - 1);
    let msg = cyclic.validate_programs(&plan).unwrap_err().to_string();
    assert!(msg.contains("op 3") && msg.contains("cycle"), "{msg}");

    let mut early = sched.clone();
    let prog = &mut early.programs[2];
    let i = find(
        prog,
        |o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Backward),
    );
    prog.ops[i].label.microbatch = Some(1);
    let err = early.validate_programs(&plan).unwrap_err();
    assert!(
        matches!(err, ValidationError::BackwardBeforeForward { .. }),
        "{err}"
    );

    // A retagged receive is only wrong against its sender: not a per-program error.
    let mut retagged = sched.clone();
    let prog = &mut retagged.programs[2];
    let i = find(prog, |o| matches!(o.kind, OpKind::Recv { .. }));
    if let OpKind::Recv { tag, .. } = &mut prog.ops[i].kind {
        *tag += 1000;
    }
    assert!(retagged.validate_programs(&plan).is_ok());
    assert!(matches!(
        retagged.validate(&plan),
        Err(ValidationError::Unmatched { .. })
    ));
}

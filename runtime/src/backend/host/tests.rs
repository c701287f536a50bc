//! Tests of the host backend: turns, line-up, bookkeeping, checkpoints, memory.
use super::*;
use crate::exec::run_step;

#[test]
fn runs_a_single_rank_program_with_real_memory() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    let mut b = HostBackend::single();
    let run = run_step(&staged.plan, &staged.schedule, 0, &mut b).unwrap();
    let ops = &staged.schedule.program(0).ops;
    assert_eq!(run.events.len(), ops.len());
    // Every op ran after its deps finished.
    for (i, op) in ops.iter().enumerate() {
        for &d in &op.deps {
            assert!(run.events[d as usize].end_ns <= run.events[i].start_ns);
        }
    }
    // The real peak equals the schedule's own account of it.
    assert_eq!(b.last_peak().peak_bytes, run.memory.peak_bytes);
    assert!(b.last_peak().peak_bytes > 0);
    // Compute ops say how long they waited for a core (Linux), never more than their span;
    // allocations and frees do not.
    if std::path::Path::new("/proc/thread-self/schedstat").exists() {
        for (op, e) in ops.iter().zip(&run.events) {
            match op.kind {
                twin_sim::schedule::OpKind::Compute(_) => {
                    let w = e.wait_ns.expect("a compute op's wait");
                    assert!(w <= e.end_ns - e.start_ns, "{e:?}");
                }
                twin_sim::schedule::OpKind::Alloc { .. }
                | twin_sim::schedule::OpKind::Free { .. } => assert_eq!(e.wait_ns, None),
                _ => {}
            }
        }
    }
}

/// `b` with `ops` enqueued as rank 0's program (no peers, no groups).
fn enqueued(mut b: HostBackend, ops: &[Op]) -> HostBackend {
    for (i, op) in ops.iter().enumerate() {
        let ctx = OpContext {
            rank: 0,
            deps: &op.deps,
            peer: None,
            group: None,
            freed: None,
        };
        b.enqueue(i as u32, op, &ctx).unwrap();
    }
    b
}

#[test]
fn stream_threads_live_across_steps() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    // The rank's program, and a small checkpoint write beside it on a second stream.
    let mut ops = staged.schedule.program(0).ops.clone();
    ops.push(Op {
        stream: Stream::Io,
        kind: OpKind::Checkpoint { bytes: 4096 },
        deps: vec![].into(),
        label: Default::default(),
    });
    let sched = twin_sim::schedule::Schedule {
        programs: vec![Program { stage: 0, ops }],
        program_of: vec![0],
    };
    let ops = &sched.programs[0].ops;
    let streams = Stream::ALL
        .iter()
        .filter(|&&st| ops.iter().any(|op| op.stream == st))
        .count() as u32;
    assert_eq!(streams, 2);
    let mut b = HostBackend::single();
    for step in 0..3 {
        let run = run_step(&staged.plan, &sched, 0, &mut b).unwrap();
        assert_eq!(run.events.len(), ops.len(), "step {step}");
        assert_eq!(b.streams.spawned(), streams, "step {step}");
    }
    // Between steps the backend holds the only reference to what the threads share.
    assert_eq!(Arc::strong_count(&b.shared), 1);
}

#[test]
fn a_step_after_the_first_allocates_from_kept_buffers_only() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    let mut b = HostBackend::single();
    let mut fresh = Vec::new();
    let mut peaks = Vec::new();
    for _ in 0..3 {
        run_step(&staged.plan, &staged.schedule, 0, &mut b).unwrap();
        fresh.push(b.shared.held.lock().unwrap().fresh_bytes());
        peaks.push(b.last_peak().peak_bytes);
    }
    assert!(fresh[0] > 0, "{fresh:?}");
    assert_eq!(&fresh[1..], &[0, 0]);
    // Reuse changes nothing in what is held.
    assert!(peaks.iter().all(|&p| p == peaks[0] && p > 0), "{peaks:?}");
}

#[test]
fn the_next_compute_op_is_ready_through_ready_bookkeeping_only() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    let compute = staged
        .schedule
        .program(0)
        .ops
        .iter()
        .find(|op| matches!(op.kind, OpKind::Compute(_)))
        .unwrap()
        .clone();
    let op = |stream, kind, deps: Vec<u32>| Op {
        stream,
        kind,
        deps: deps.into(),
        label: Default::default(),
    };
    let alloc = OpKind::Alloc {
        category: twin_sim::schedule::MemCategory::Activations,
        device: twin_sim::schedule::Device::Gpu,
        bytes: 64,
        tag: 1,
    };
    let ops = [
        compute.clone(),
        op(Stream::Compute, OpKind::Free { tag: 9 }, vec![0]),
        op(Stream::Compute, alloc, vec![]),
        compute.clone(),
        op(Stream::Io, OpKind::Checkpoint { bytes: 64 }, vec![]),
        Op {
            deps: vec![4].into(),
            ..compute.clone()
        },
    ];
    let job = enqueued(HostBackend::single(), &ops).job();
    let compute = Stream::Compute.index();
    // The compute stream holds ops 0, 1, 2, 3, 5 (positions 0-4); the io stream op 4.
    // Op 0 ending readies the free that waits for it, the allocation and op 3 (position 3).
    assert_eq!(job.next_ready_compute(compute, 0), Some(3));
    // Before op 0 ends, its own position is the next compute op (already in line).
    assert_eq!(job.next_ready_compute(compute, 4), Some(0));
    job.st.complete(0);
    job.st.complete(1);
    job.st.complete(2);
    // Op 3 running: it is the stream's next op, and op 5 waits for the checkpoint.
    job.st.complete(3);
    assert_eq!(job.next_ready_compute(compute, 99), None);
    // The checkpoint (op 4, another stream) ending readies op 5 (position 4).
    assert_eq!(job.next_ready_compute(compute, 4), Some(4));
    // A stream whose next op is not compute has none.
    assert_eq!(job.next_ready_compute(Stream::Io.index(), 3), None);
    assert_eq!(job.next_ready_compute(Stream::COUNT, 3), None);
}

#[test]
fn a_ready_compute_op_gets_exactly_one_ticket_whoever_takes_it() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    let ops = &staged.schedule.program(0).ops;
    let job = enqueued(HostBackend::single(), ops).job();
    let turns = turns::CoreTurns::private().unwrap();
    let compute = Stream::Compute.index();
    let first = ops
        .iter()
        .position(|op| matches!(op.kind, OpKind::Compute(_)))
        .unwrap();
    // Nothing done yet: the stream's first compute op is ready (ready allocations before
    // it). A completion elsewhere lines it up once; the stream thread then gets that
    // ticket, not a new one.
    let pos = job.next_ready_compute(compute, u32::MAX).unwrap();
    job.line_up(&turns, u32::MAX);
    job.line_up(&turns, u32::MAX);
    let t = job.ticket_at(&turns, compute, pos);
    assert_eq!(t.number(), 0, "the ticket the completion took");
    let turn = t.wait(|| false).unwrap();
    // The stream thread's own ticket for the same op is not taken again by a completion
    // while the op runs: the next ticket out is 1.
    job.line_up(&turns, u32::MAX);
    assert_eq!(turns.ticket().number(), 1);
    drop(turn);
    // Its end readies the stream's next compute op (the second layer's forward): lined up
    // at the end, before the end is marked done.
    for i in 0..first {
        job.st.complete(i as u32);
    }
    let next = job
        .next_ready_compute(compute, first as u32)
        .expect("the next layer's forward is ready");
    assert!(next > pos);
    job.line_up(&turns, first as u32);
    assert_eq!(job.ticket_at(&turns, compute, next).number(), 2);
}

#[test]
fn only_ready_allocations_and_frees_skip_the_yield() {
    let s = twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2);
    let staged = crate::testkit::planned(&s);
    let plan = &staged.plan;
    let ops = &staged.schedule.program(0).ops;
    let mut b = HostBackend::single();
    b.prepare(plan, 0, staged.schedule.program(0)).unwrap();
    let job = enqueued(b, ops).job();
    let st = &job.st;
    let bookkeeping = |op: &Op| matches!(op.kind, OpKind::Alloc { .. } | OpKind::Free { .. });
    let with_deps = ops
        .iter()
        .position(|op| bookkeeping(op) && !op.deps.is_empty())
        .expect("a free with deps");
    let compute = ops
        .iter()
        .position(|op| matches!(op.kind, OpKind::Compute(_)))
        .unwrap();
    let free_of_deps = ops
        .iter()
        .position(|op| bookkeeping(op) && op.deps.is_empty())
        .unwrap();
    assert!(!job.bookkeeping_ready(Some(&compute)));
    assert!(job.bookkeeping_ready(Some(&free_of_deps)));
    assert!(!job.bookkeeping_ready(Some(&with_deps)));
    for &d in &ops[with_deps].deps {
        st.complete(d);
    }
    assert!(job.bookkeeping_ready(Some(&with_deps)));
    assert!(!job.bookkeeping_ready(None));
    assert!(!job.bookkeeping_ready(Some(&ops.len())));
}

#[test]
fn a_checkpoint_writes_a_real_file_and_removes_it() {
    let plan = Plan::new(&twin_sim::testing::small_scenario(1, 1, 1, 1)).unwrap();
    let op = Op {
        stream: Stream::Io,
        kind: OpKind::Checkpoint { bytes: 3 << 20 },
        deps: vec![].into(),
        label: Default::default(),
    };
    let sched = twin_sim::schedule::Schedule {
        programs: vec![Program {
            stage: 0,
            ops: vec![op],
        }],
        program_of: vec![0],
    };
    let run = run_step(&plan, &sched, 0, &mut HostBackend::single()).unwrap();
    assert_eq!(run.events.len(), 1);
    assert_eq!(run.events[0].bytes, 3 << 20);
    let leftover = std::env::temp_dir().join(format!("twin-ckpt-{}-rank0.bin", std::process::id()));
    assert!(!leftover.exists());
}
